"""The conf's Kafka security, turned into client settings for both client families.

The job talks to Kafka through two clients that spell everything differently: librdkafka (the
confluent-kafka Python clients: the start checks, the producer of requests and alerts, the
``urbpipe`` tools) and the Java client inside Spark's Kafka source. One conf (``kafka:``, flat
keys) must reach both the same way, so the translation lives here, in one pure module, and
``Kafka.confluent()`` / ``Kafka.spark()`` (pipeline/config/) are its only callers.

Choices, and why:

* A PEM CA (``ssl_ca_location``) reaches Java as ``ssl.truststore.type=PEM``: without the type
  the Java client reads the file as JKS and fails.
* Mutual TLS with PEM files (``ssl_certificate_location`` + ``ssl_key_location``): Java's PEM
  keystore wants ONE file holding key and chain, so the Java values
  ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key`` are built inline from the files'
  text here, at mapping time. The executors then need no copy of the key file, and the same
  two files serve librdkafka. Java reads PKCS#8 keys only (``BEGIN PRIVATE KEY`` or ``BEGIN
  ENCRYPTED PRIVATE KEY``, the latter with ``ssl_key_password``); a PKCS#1 key is refused here
  in one line instead of failing later inside the JVM. An encrypted key reaches Java
  decrypted, in memory (``java_readable_key``: Java 17 cannot read PBES2-encrypted keys).
* librdkafka cannot read JKS: with a JKS or PKCS12 truststore the Python side needs
  ``ssl_ca_location`` too, and is refused without it (a PEM truststore serves both). With no CA
  key at all both clients use the system's CA store (librdkafka's default when
  ``ssl.ca.location`` is unset; the JVM's cacerts), which is allowed.
* ``*_file`` keys read a secret from a file (Kubernetes/Vault mounts) here, at mapping time,
  with one trailing newline stripped; giving both the value and its ``_file`` is refused.
* JAAS values are double-quoted with ``\\`` and ``"`` backslash-escaped: Kafka's JaasConfig
  parses ``sasl.jaas.config`` with java.io.StreamTokenizer, whose quoted strings take the
  usual backslash escapes (and end at an unescaped newline, so newlines are escaped too).
* Pass-through options come last: ``client_options`` (librdkafka names) and
  ``java_client_options`` (Java names without the ``kafka.`` prefix) win over the mapping.

Errors are ``ConfigError`` with one line naming the key; no message carries a secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pipeline.config_error import ConfigError


class Kafka(Protocol):
    """What this module reads of the conf's ``kafka:`` section (``pipeline.config.Kafka``),
    so the settings import this module and not the other way round."""

    bootstrap_servers: str
    security_protocol: str
    sasl_mechanism: str | None
    sasl_username: str | None
    sasl_password: Any
    sasl_password_file: str | None
    sasl_kerberos_service_name: str
    sasl_kerberos_principal: str | None
    sasl_kerberos_keytab: str | None
    sasl_oauthbearer_token_endpoint_url: str | None
    sasl_oauthbearer_client_id: str | None
    sasl_oauthbearer_client_secret: Any
    sasl_oauthbearer_client_secret_file: str | None
    sasl_oauthbearer_scope: str | None
    ssl_ca_location: str | None
    ssl_truststore_location: str | None
    ssl_truststore_type: str | None
    ssl_certificate_location: str | None
    ssl_key_location: str | None
    ssl_key_password: Any
    ssl_key_password_file: str | None
    ssl_keystore_location: str | None
    ssl_keystore_type: str | None
    ssl_endpoint_identification: bool
    client_options: dict[str, str]
    java_client_options: dict[str, str]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: the secret keys that may instead be read from ``<key>_file``
SECRET_KEYS = ("sasl_password", "ssl_truststore_password", "ssl_keystore_password",
               "ssl_key_password", "sasl_oauthbearer_client_secret")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "GSSAPI": "com.sun.security.auth.module.Krb5LoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
#: Kafka >= 3.4 (and the only name in 4.x): the client-credentials login of KIP-768
OAUTH_LOGIN_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler")
_SUFFIX_TYPES = {".jks": "JKS", ".p12": "PKCS12", ".pfx": "PKCS12", ".pem": "PEM",
                 ".crt": "PEM"}


def _error(message: str) -> Exception:
    return ConfigError(message)


def check(k: Kafka) -> None:
    """The cross-key rules of ``kafka:``; ValueError (one line naming the key) when broken.
    Called by the model's validator, so a bad conf fails at load, before any client exists."""
    tls = k.security_protocol in TLS_PROTOCOLS
    sasl = k.security_protocol in SASL_PROTOCOLS
    for name in SECRET_KEYS:
        if getattr(k, name) is not None and getattr(k, f"{name}_file") is not None:
            raise ValueError(f"{name} and {name}_file are both given: give one")
    if sasl and not k.sasl_mechanism:
        raise ValueError("sasl_mechanism is required when security_protocol is SASL_*")
    sasl_keys = [n for n in ("sasl_mechanism", "sasl_username", "sasl_password",
                             "sasl_password_file", "sasl_kerberos_principal",
                             "sasl_kerberos_keytab", "sasl_oauthbearer_token_endpoint_url",
                             "sasl_oauthbearer_client_id", "sasl_oauthbearer_client_secret",
                             "sasl_oauthbearer_client_secret_file", "sasl_oauthbearer_scope")
                 if getattr(k, n) is not None]
    if sasl_keys and not sasl:
        raise ValueError(f"{sasl_keys[0]} is set but security_protocol "
                         f"{k.security_protocol} does not use SASL")
    tls_keys = [n for n in ("ssl_ca_location", "ssl_truststore_location",
                            "ssl_certificate_location", "ssl_key_location",
                            "ssl_keystore_location") if getattr(k, n) is not None]
    if tls_keys and not tls:
        raise ValueError(f"{tls_keys[0]} is set but security_protocol "
                         f"{k.security_protocol} does not use TLS")
    if bool(k.ssl_certificate_location) != bool(k.ssl_key_location):
        raise ValueError("ssl_certificate_location and ssl_key_location go together "
                         "(mutual TLS with PEM files)")
    if k.ssl_keystore_location and k.ssl_certificate_location:
        raise ValueError("ssl_keystore_location and ssl_certificate_location are both given: "
                         "one client certificate, one way")
    has_key_password = k.ssl_key_password is not None or k.ssl_key_password_file is not None
    if has_key_password and not (k.ssl_key_location or k.ssl_keystore_location):
        raise ValueError("ssl_key_password is given without ssl_key_location or "
                         "ssl_keystore_location")
    if tls:
        _python_trust(k)  # raises when the Python clients would have no CA they can read
        _python_identity(k)


def _credentials(k: Kafka) -> None:
    """The mechanism's credentials are all there (ConfigError naming the key). Checked when
    the settings are mapped, not at load: they usually come from the environment, and a conf
    file without them is valid until a client is made from it."""
    mech = k.sasl_mechanism
    missing: str | None = None
    if mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if not k.sasl_username:
            missing = "sasl_username"
        elif k.sasl_password is None and k.sasl_password_file is None:
            missing = "sasl_password (or sasl_password_file)"
    elif mech == "GSSAPI" and k.sasl_kerberos_keytab and not k.sasl_kerberos_principal:
        missing = "sasl_kerberos_principal"
    elif mech == "OAUTHBEARER":
        missing = next((n for n in ("sasl_oauthbearer_token_endpoint_url",
                                    "sasl_oauthbearer_client_id") if not getattr(k, n)), None)
        if (missing is None and k.sasl_oauthbearer_client_secret is None
                and k.sasl_oauthbearer_client_secret_file is None):
            missing = "sasl_oauthbearer_client_secret (or _file)"
    if missing:
        raise _error(f"kafka.{missing} is required with sasl_mechanism {mech} (give secrets "
                     "through the environment or a *_file key)")


def store_type(location: str, given: str | None) -> str:
    """A key/trust store's type: as given, else from the file name (.p12/.pfx PKCS12,
    .pem/.crt PEM), else JKS (the Java client's own default)."""
    return given or _SUFFIX_TYPES.get(Path(location).suffix.lower(), "JKS")


def _python_trust(k: Kafka) -> str | None:
    """The CA file librdkafka reads (None: the system's CA store)."""
    if k.ssl_ca_location:
        return k.ssl_ca_location
    if k.ssl_truststore_location:
        kind = store_type(k.ssl_truststore_location, k.ssl_truststore_type)
        if kind == "PEM":
            return k.ssl_truststore_location
        raise ValueError(f"ssl_truststore_location is a {kind} store, which the Python "
                         "clients (librdkafka) cannot read: give ssl_ca_location (PEM) too")
    return None


def _python_identity(k: Kafka) -> dict[str, str]:
    """librdkafka's client-certificate keys without the secrets (which the mapping adds)."""
    if k.ssl_certificate_location and k.ssl_key_location:
        return {"ssl.certificate.location": k.ssl_certificate_location,
                "ssl.key.location": k.ssl_key_location}
    if k.ssl_keystore_location:
        kind = store_type(k.ssl_keystore_location, k.ssl_keystore_type)
        if kind != "PKCS12":
            raise ValueError(f"ssl_keystore_location is a {kind} store, which the Python "
                             "clients (librdkafka) cannot read: give ssl_certificate_location "
                             "and ssl_key_location (PEM) instead, or a PKCS12 keystore")
        return {"ssl.keystore.location": k.ssl_keystore_location}
    return {}


def secret(k: Kafka, name: str) -> str | None:
    """The secret ``name`` from the conf or from the file ``<name>_file`` names (one trailing
    newline stripped); ConfigError naming the key when the file cannot be read."""
    value = getattr(k, name)
    if value is not None:
        return value.get_secret_value()
    path = getattr(k, f"{name}_file")
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise _error(f"kafka.{name}_file: cannot read {path}: {exc.strerror}") from None
    return text.removesuffix("\n").removesuffix("\r")


def _read_pem(name: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise _error(f"kafka.{name}: cannot read {path}: {exc.strerror}") from None


def _drop_none(opts: dict[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in opts.items() if value is not None}


def librdkafka(k: Kafka) -> dict[str, str]:
    """Settings for confluent-kafka (librdkafka names), ``client_options`` last."""
    _credentials(k)
    opts: dict[str, str | None] = {"bootstrap.servers": k.bootstrap_servers,
                                   "security.protocol": k.security_protocol}
    mech = k.sasl_mechanism
    if k.security_protocol in SASL_PROTOCOLS:
        opts["sasl.mechanism"] = mech
        if mech == "GSSAPI":
            opts.update({"sasl.kerberos.service.name": k.sasl_kerberos_service_name,
                         "sasl.kerberos.principal": k.sasl_kerberos_principal,
                         "sasl.kerberos.keytab": k.sasl_kerberos_keytab})
        elif mech == "OAUTHBEARER":
            opts.update({"sasl.oauthbearer.method": "oidc",
                         "sasl.oauthbearer.token.endpoint.url":
                             k.sasl_oauthbearer_token_endpoint_url,
                         "sasl.oauthbearer.client.id": k.sasl_oauthbearer_client_id,
                         "sasl.oauthbearer.client.secret":
                             secret(k, "sasl_oauthbearer_client_secret"),
                         "sasl.oauthbearer.scope": k.sasl_oauthbearer_scope})
        else:
            opts.update({"sasl.username": k.sasl_username,
                         "sasl.password": secret(k, "sasl_password")})
    if k.security_protocol in TLS_PROTOCOLS:
        try:
            opts["ssl.ca.location"] = _python_trust(k)
            opts.update(_python_identity(k))
        except ValueError as exc:
            raise _error(f"kafka: {exc}") from None
        opts["ssl.endpoint.identification.algorithm"] = (
            "https" if k.ssl_endpoint_identification else "none")
        if "ssl.keystore.location" in opts:
            opts["ssl.keystore.password"] = secret(k, "ssl_keystore_password")
        else:
            opts["ssl.key.password"] = secret(k, "ssl_key_password")
    return {**_drop_none(opts), **k.client_options}


def jaas_quote(value: str) -> str:
    """``value`` as a double-quoted JAAS option value Kafka's JaasConfig parses back."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"')
               .replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{escaped}"'


def jaas(module: str, options: dict[str, str | None]) -> str:
    """One ``sasl.jaas.config`` entry: the module, ``required``, its quoted options, ``;``."""
    parts = [f"{key}={jaas_quote(value)}" for key, value in options.items() if value is not None]
    return " ".join([module, "required", *parts]) + ";"


def _java_sasl(k: Kafka) -> dict[str, str | None]:
    mech = k.sasl_mechanism or ""
    module = _LOGIN_MODULES[mech]
    opts: dict[str, str | None] = {"sasl.mechanism": mech}
    if mech == "GSSAPI":
        opts["sasl.kerberos.service.name"] = k.sasl_kerberos_service_name
        krb: dict[str, str | None] = (
            {"useKeyTab": "true", "storeKey": "true", "keyTab": k.sasl_kerberos_keytab,
             "principal": k.sasl_kerberos_principal} if k.sasl_kerberos_keytab
            else {"useTicketCache": "true", "principal": k.sasl_kerberos_principal})
        opts["sasl.jaas.config"] = jaas(module, krb)
    elif mech == "OAUTHBEARER":
        opts["sasl.login.callback.handler.class"] = OAUTH_LOGIN_HANDLER
        opts["sasl.oauthbearer.token.endpoint.url"] = k.sasl_oauthbearer_token_endpoint_url
        opts["sasl.jaas.config"] = jaas(module, {
            "clientId": k.sasl_oauthbearer_client_id,
            "clientSecret": secret(k, "sasl_oauthbearer_client_secret"),
            "scope": k.sasl_oauthbearer_scope})
    else:
        opts["sasl.jaas.config"] = jaas(module, {"username": k.sasl_username,
                                                 "password": secret(k, "sasl_password")})
    return opts


def _java_tls(k: Kafka) -> dict[str, str | None]:
    opts: dict[str, str | None] = {
        "ssl.endpoint.identification.algorithm": "https" if k.ssl_endpoint_identification
        else ""}
    if k.ssl_truststore_location:
        kind = store_type(k.ssl_truststore_location, k.ssl_truststore_type)
        opts.update({"ssl.truststore.location": k.ssl_truststore_location,
                     "ssl.truststore.type": kind,
                     "ssl.truststore.password": secret(k, "ssl_truststore_password")})
    elif k.ssl_ca_location:
        opts.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": k.ssl_ca_location})
    if k.ssl_keystore_location:
        opts.update({"ssl.keystore.location": k.ssl_keystore_location,
                     "ssl.keystore.type": store_type(k.ssl_keystore_location,
                                                     k.ssl_keystore_type),
                     "ssl.keystore.password": secret(k, "ssl_keystore_password"),
                     "ssl.key.password": secret(k, "ssl_key_password")})
    elif k.ssl_certificate_location and k.ssl_key_location:
        key = _read_pem("ssl_key_location", k.ssl_key_location)
        password = secret(k, "ssl_key_password")
        if "BEGIN PRIVATE KEY" not in key and "BEGIN ENCRYPTED PRIVATE KEY" not in key:
            raise _error("kafka.ssl_key_location: the Java client reads PKCS#8 keys only "
                         "(BEGIN PRIVATE KEY): convert it with openssl pkcs8 -topk8")
        if "BEGIN ENCRYPTED PRIVATE KEY" in key and password is None:
            raise _error("kafka.ssl_key_location: the key is encrypted: give "
                         "ssl_key_password (or ssl_key_password_file)")
        if password is not None:  # Java 17 reads no PBES2 key: see java_readable_key
            key, password = java_readable_key(key, password), None
        opts.update({"ssl.keystore.type": "PEM",
                     "ssl.keystore.certificate.chain":
                         _read_pem("ssl_certificate_location", k.ssl_certificate_location),
                     "ssl.keystore.key": key, "ssl.key.password": password})
    return opts


def java_readable_key(key: str, password: str) -> str:
    """An encrypted PKCS#8 key as the Java client on Java 17 can read it: decrypted, in
    memory only (the inline ``ssl.keystore.key``, then given without ``ssl.key.password``).

    Why: openssl and the ``cryptography`` package encrypt with PBES2 (AES) by default, and
    Kafka's PEM keystore asks the JRE for a ``SecretKeyFactory`` named after the scheme; Java
    17 has none for "PBES2" ("Invalid PEM keystore configs ... PBES2 SecretKeyFactory not
    available", seen on this project's secured broker), and ``cryptography`` cannot write
    the PBES1 form Java reads. The decrypted key is a secret of the same standing as the
    password that opens it: it travels only inside the Kafka options (Spark's redaction
    regex covers ``keystore.key``), never to a file; librdkafka keeps reading the encrypted
    key file with its password.
    """
    from cryptography.hazmat.primitives import serialization

    try:
        loaded = serialization.load_pem_private_key(key.encode(), password.encode())
    except (ValueError, TypeError):
        raise _error("kafka.ssl_key_location: the key cannot be decrypted with "
                     "ssl_key_password (wrong password, or not a PEM private key)") from None
    return loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()


def java(k: Kafka) -> dict[str, str]:
    """Settings for the Java client (no ``kafka.`` prefix), ``java_client_options`` last."""
    _credentials(k)
    opts: dict[str, str | None] = {"bootstrap.servers": k.bootstrap_servers,
                                   "security.protocol": k.security_protocol}
    if k.security_protocol in SASL_PROTOCOLS:
        opts.update(_java_sasl(k))
    if k.security_protocol in TLS_PROTOCOLS:
        opts.update(_java_tls(k))
    return {**_drop_none(opts), **k.java_client_options}
