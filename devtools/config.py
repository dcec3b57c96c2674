"""The rig's own conf section, ``devtools:``: what the simulator and the local broker read and
the job never does.

A production conf has no ``devtools`` section and no key the job ignores. The demo's and the
tests' confs carry one::

    devtools:
      local_broker: {port: 9092, data_dir: .kafka, security: {enabled: false}}
      subscriptions:               # how the simulator generates each subscription
        EMPLOYEE: {images: both, resend_buffer: false}

``pipeline.config.Settings`` keeps the section as it is (``settings.devtools``) and moves the
keys older confs have in product sections into it, with a warning: ``devtools.local_broker``, and
``images``/``resend_buffer`` of a subscription. ``rig(settings)`` validates it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.config import ConfigError, Model, Settings

#: The roles a secured local broker's SCRAM user can have; each is a set of ACLs derived from
#: ``topics`` (devtools/broker_security.py, ``acl_plan``; the table in conf/README.md).
BrokerRole = Literal["job", "replicator", "reader"]
_BROKER_USER = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class BrokerSecurity(Model):
    """TLS, authentication and ACLs for the local broker (``local_broker.security``).

    When enabled the broker listens only on a SASL_SSL port (SCRAM) and an SSL port with client
    certificates (mutual TLS), has the standard authorizer with no ACL meaning no access, and
    ``admin`` as its only super user besides itself. Passwords and keys are made at the first
    start and live in ``<data_dir>/secure`` (mode 0600), never in this file.
    """

    enabled: bool = False
    sasl_ssl_port: int = Field(9094, ge=1024, le=65535)
    ssl_port: int = Field(9095, ge=1024, le=65535)
    # SCRAM users besides admin (each also gets a client certificate CN=<name>) → their role
    users: dict[str, BrokerRole] = Field(
        default_factory=lambda: {"job": "job", "replicator": "replicator", "nowrite": "reader"})
    cert_days: int = Field(30, ge=1, le=3650)

    @field_validator("users")
    @classmethod
    def _user_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _BROKER_USER.match(name) or name in ("admin", "broker"):
                raise ValueError(f"user {name!r}: a lower-case name (letters, digits, - and _) "
                                 "other than admin and broker, which the broker keeps for itself")
        return value


class LocalBroker(Model):
    """The single-node KRaft broker the project starts itself (demo, tests, benchmarks)."""

    port: int = Field(9092, ge=1024, le=65535)
    controller_port: int = Field(9093, ge=1024, le=65535)
    data_dir: str = ".kafka"
    heap: str = "512m"
    max_message_bytes: int = Field(2_097_152, ge=1_048_576)
    # of the topics the job does not read (requests, alerts); its source topics get one
    partitions: int = Field(1, ge=1, le=64)
    security: BrokerSecurity = BrokerSecurity()

    @model_validator(mode="after")
    def _ports_differ(self) -> LocalBroker:
        ports = [self.controller_port, self.port]
        if self.security.enabled:  # the PLAINTEXT port is not opened then
            ports[1:] = [self.security.sasl_ssl_port, self.security.ssl_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"the broker's ports must differ: {ports}")
        return self


class SimSubscription(Model):
    """How the simulator generates one subscription's messages beyond what the job's conf
    says of it (its form is the subscription's ``ebcdic``)."""

    images: Literal["after", "before", "both"] = "both"
    resend_buffer: bool = True


class Rig(Model):
    """The ``devtools:`` section."""

    local_broker: LocalBroker = LocalBroker()
    subscriptions: dict[str, SimSubscription] = Field(default_factory=dict)

    def subscription(self, name: str) -> SimSubscription:
        """The simulator's settings of subscription ``name`` (defaults when not listed)."""
        return self.subscriptions.get(name) or SimSubscription()


def rig(settings: Settings) -> Rig:
    """``settings.devtools`` validated; an invalid key is one ``ConfigError`` line naming it."""
    try:
        return Rig.model_validate(settings.devtools)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("devtools", *first["loc"]))
        raise ConfigError(f"{where}: {first['msg']}") from None

