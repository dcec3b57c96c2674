"""The ``kafka:`` section: where the brokers are and how the job authenticates (the
translation to client options is ``pipeline.kafka_security``), and the local broker the
development rig starts."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from pipeline import kafka_security
from pipeline.config.base import Model

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


class Kafka(Model):
    """Connection to the Kafka cluster that carries replicator output and requests.

    Security keys are flat, and both client families get them through ONE translation
    (``pipeline/kafka_security.py``): ``confluent()`` for librdkafka, ``spark()`` for the Java
    client. Secrets are ``SecretStr`` (never printed by repr) or read from ``*_file``.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI",
                            "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: str | None = None
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_principal: str | None = None
    sasl_kerberos_keytab: str | None = None
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_id: str | None = None
    sasl_oauthbearer_client_secret: SecretStr | None = None
    sasl_oauthbearer_client_secret_file: str | None = None
    sasl_oauthbearer_scope: str | None = None
    ssl_ca_location: str | None = None
    ssl_truststore_location: str | None = None
    ssl_truststore_type: Literal["JKS", "PKCS12", "PEM"] | None = None
    ssl_truststore_password: SecretStr | None = None
    ssl_truststore_password_file: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    ssl_key_password_file: str | None = None
    ssl_keystore_location: str | None = None
    ssl_keystore_type: Literal["JKS", "PKCS12", "PEM"] | None = None
    ssl_keystore_password: SecretStr | None = None
    ssl_keystore_password_file: str | None = None
    ssl_endpoint_identification: bool = True
    # Spark's Kafka source names its consumer groups <prefix>-<uuid>…: the prefix an ACL
    # on consumer groups can name (README, "Secured Kafka").
    group_id_prefix: str = Field("spark-kafka-source", min_length=1)
    client_options: dict[str, str] = Field(default_factory=dict)
    java_client_options: dict[str, str] = Field(default_factory=dict)
    local_broker: LocalBroker = LocalBroker()

    @field_validator("java_client_options")
    @classmethod
    def _java_names(cls, value: dict[str, str]) -> dict[str, str]:
        prefixed = sorted(k for k in value if k.startswith("kafka."))
        if prefixed:
            raise ValueError(f"{prefixed[0]}: give Java client names without the kafka. "
                             "prefix (the job adds it)")
        return value

    @model_validator(mode="after")
    def _security_complete(self) -> Kafka:
        kafka_security.check(self)
        return self

    def confluent(self) -> dict[str, str]:
        """Options for confluent-kafka (librdkafka names); reads ``*_file`` secrets now."""
        return kafka_security.librdkafka(self)

    def spark(self) -> dict[str, str]:
        """Options for Spark's Kafka source and sink (``kafka.``-prefixed Java client names);
        reads ``*_file`` secrets and the PEM client certificate and key now."""
        return {f"kafka.{k}": v for k, v in kafka_security.java(self).items()}
