"""The two error types of the payload codec.

One type per audience: :class:`LayoutError` is a configuration or GFFT problem (fix the conf),
:class:`PayloadError` is a problem with one image (quarantine it with ``reason``).  The job
only has to catch ``PayloadError`` around ``decode_payload`` to route bad images.
"""

from __future__ import annotations


class LayoutError(ValueError):
    """A format buffer, conf entry or GFFT that does not describe a usable record layout."""


class PayloadError(ValueError):
    """An image that does not match its layout: which field, at which byte offset, and why.

    ``field`` is the Adabas short name (with the occurrence, e.g. ``AB[2]``) or ``""`` when the
    problem is not tied to one field (an unknown code page, trailing bytes).
    """

    def __init__(self, field: str, offset: int, reason: str) -> None:
        super().__init__(f"{field or 'payload'} at offset {offset}: {reason}")
        self.field = field
        self.offset = offset
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:
        # Spark pickles exceptions between workers; keep the three parts.
        return (PayloadError, (self.field, self.offset, self.reason))
