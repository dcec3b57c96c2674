"""The ``kafka:`` section: where the brokers are and how the job authenticates (the
translation to client options is ``pipeline.kafka_security``)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from pipeline import kafka_security
from pipeline.config.base import Model


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
