"""The configuration error every layer raises: its own module, so code that ``pipeline.config``
imports (``pipeline.kafka_security``) can raise it without importing config back."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is invalid; the message is one line naming the key and the problem."""
