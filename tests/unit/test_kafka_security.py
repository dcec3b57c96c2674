"""The conf's Kafka security mapped to both client families (pipeline/kafka_security.py):
every mechanism, JAAS escaping, secret files, hostname verification, pass-through order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import ConfigError, Kafka, load_settings
from pipeline.kafka_security import OAUTH_LOGIN_HANDLER, jaas, jaas_quote

SECRET = 'Se"cr\\et-7f3a'
CHAIN = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
ENCRYPTED_KEY = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF\n-----END ENCRYPTED PRIVATE KEY-----\n"


def kafka(**kw: Any) -> Kafka:
    return Kafka(bootstrap_servers="b1:9093", **kw)


def both(k: Kafka) -> tuple[dict[str, str], dict[str, str]]:
    return k.confluent(), k.spark()


def unquote_jaas(text: str) -> dict[str, str]:
    """A tiny reference parser for one JAAS entry (what Kafka's JaasConfig reads back): the
    module, ``required``, ``key="value"`` pairs with StreamTokenizer's escapes, ``;``."""
    escapes = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
    module, flag, rest = text.split(" ", 2) if text.count(" ") >= 2 else (*text.split(" "), "")
    assert flag.rstrip(";") == "required"
    options: dict[str, str] = {"__module__": module}
    i = 0
    while i < len(rest) and rest[i] != ";":
        eq = rest.index("=", i)
        key = rest[i:eq].strip()
        assert rest[eq + 1] == '"'
        j, value = eq + 2, []
        while rest[j] != '"':
            assert rest[j] != "\n", "an unescaped newline ends a StreamTokenizer string"
            if rest[j] == "\\":
                j += 1
                value.append(escapes[rest[j]])
            else:
                value.append(rest[j])
            j += 1
        options[key] = "".join(value)
        i = j + 1
        while i < len(rest) and rest[i] == " ":
            i += 1
    assert text.endswith(";")
    return options


# -- mechanisms, both families -----------------------------------------------------------------

def test_plaintext_is_just_the_servers() -> None:
    py, java = both(kafka())
    assert py == {"bootstrap.servers": "b1:9093", "security.protocol": "PLAINTEXT"}
    assert java == {"kafka.bootstrap.servers": "b1:9093", "kafka.security.protocol": "PLAINTEXT"}


def test_ssl_with_a_pem_ca_tells_java_the_truststore_is_pem() -> None:
    py, java = both(kafka(security_protocol="SSL", ssl_ca_location="/ca.pem"))
    assert py["ssl.ca.location"] == "/ca.pem"
    assert py["ssl.endpoint.identification.algorithm"] == "https"
    assert java["kafka.ssl.truststore.type"] == "PEM"
    assert java["kafka.ssl.truststore.location"] == "/ca.pem"
    assert java["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert "kafka.ssl.truststore.password" not in java


def test_ssl_with_a_jks_truststore_needs_a_pem_ca_for_the_python_side() -> None:
    with pytest.raises(ConfigError, match=r"JKS store, which the Python clients "
                                          r"\(librdkafka\) cannot read: give ssl_ca_location"):
        load_conf("kafka:\n  security_protocol: SSL\n  ssl_truststore_location: /t.jks\n")
    py, java = both(kafka(security_protocol="SSL", ssl_truststore_location="/t.jks",
                          ssl_truststore_password=SECRET, ssl_ca_location="/ca.pem"))
    assert py["ssl.ca.location"] == "/ca.pem"
    assert java["kafka.ssl.truststore.location"] == "/t.jks"
    assert java["kafka.ssl.truststore.type"] == "JKS"
    assert java["kafka.ssl.truststore.password"] == SECRET


def test_a_pem_or_pkcs12_store_type_comes_from_the_name_or_the_conf() -> None:
    py, java = both(kafka(security_protocol="SSL", ssl_truststore_location="/t.pem"))
    assert py["ssl.ca.location"] == "/t.pem" and java["kafka.ssl.truststore.type"] == "PEM"
    _, java = both(kafka(security_protocol="SSL", ssl_truststore_location="/t.store",
                         ssl_truststore_type="PKCS12", ssl_ca_location="/ca.pem"))
    assert java["kafka.ssl.truststore.type"] == "PKCS12"


def test_no_ca_at_all_means_the_system_store_on_both_sides() -> None:
    py, java = both(kafka(security_protocol="SSL"))
    assert "ssl.ca.location" not in py and "kafka.ssl.truststore.location" not in java


def _pbes2_key() -> tuple[Any, str]:
    """A real EC key, encrypted as openssl and ``cryptography`` do by default (PBES2, AES)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(SECRET.encode()))
    return private, pem.decode()


def test_mutual_tls_with_pem_files_inlines_chain_and_key_for_java(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    private, encrypted = _pbes2_key()
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(CHAIN)
    key.write_text(encrypted)
    py, java = both(kafka(security_protocol="SSL", ssl_ca_location="/ca.pem",
                          ssl_certificate_location=str(cert), ssl_key_location=str(key),
                          ssl_key_password=SECRET))
    assert py["ssl.certificate.location"] == str(cert)
    assert py["ssl.key.location"] == str(key) and py["ssl.key.password"] == SECRET
    assert java["kafka.ssl.keystore.type"] == "PEM"
    assert java["kafka.ssl.keystore.certificate.chain"] == CHAIN
    assert "kafka.ssl.keystore.location" not in java
    # Java 17 reads no PBES2 key: its copy is the same key, decrypted, and no key password
    inline = java["kafka.ssl.keystore.key"]
    assert inline.startswith("-----BEGIN PRIVATE KEY-----")
    assert "kafka.ssl.key.password" not in java
    again = serialization.load_pem_private_key(inline.encode(), None)
    assert again.private_numbers() == private.private_numbers()


def test_an_encrypted_key_with_the_wrong_password_is_refused_in_one_line(tmp_path: Path
                                                                         ) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(CHAIN)
    key.write_text(_pbes2_key()[1])
    k = kafka(security_protocol="SSL", ssl_certificate_location=str(cert),
              ssl_key_location=str(key), ssl_key_password="Xq7-not-it")
    with pytest.raises(ConfigError, match=r"^kafka\.ssl_key_location: the key cannot be "
                       r"decrypted") as refused:
        k.spark()
    assert "Xq7-not-it" not in str(refused.value)


def test_a_pkcs1_key_or_an_encrypted_key_without_password_is_refused(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(CHAIN)
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nMII\n-----END RSA PRIVATE KEY-----\n")
    k = kafka(security_protocol="SSL", ssl_certificate_location=str(cert),
              ssl_key_location=str(key))
    with pytest.raises(ConfigError, match=r"^kafka\.ssl_key_location: .*PKCS#8"):
        k.spark()
    key.write_text(ENCRYPTED_KEY)
    with pytest.raises(ConfigError, match=r"the key is encrypted: give ssl_key_password"):
        k.spark()
    key.write_text(KEY)
    assert "kafka.ssl.key.password" not in k.spark()
    with pytest.raises(ConfigError, match=r"^kafka\.ssl_certificate_location: cannot read"):
        kafka(security_protocol="SSL", ssl_certificate_location=str(tmp_path / "none"),
              ssl_key_location=str(key)).spark()


def test_mutual_tls_with_a_keystore() -> None:
    py, java = both(kafka(security_protocol="SSL", ssl_ca_location="/ca.pem",
                          ssl_keystore_location="/me.p12", ssl_keystore_password=SECRET))
    assert py["ssl.keystore.location"] == "/me.p12" and py["ssl.keystore.password"] == SECRET
    assert java["kafka.ssl.keystore.location"] == "/me.p12"
    assert java["kafka.ssl.keystore.type"] == "PKCS12"
    assert java["kafka.ssl.keystore.password"] == SECRET
    with pytest.raises(ConfigError, match=r"JKS store, which the Python clients"):
        load_conf("kafka:\n  security_protocol: SSL\n  ssl_keystore_location: /me.jks\n")


@pytest.mark.parametrize(("protocol", "mechanism", "module"), [
    ("SASL_PLAINTEXT", "PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SASL_SSL", "SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("SASL_SSL", "SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_user_and_password_mechanisms(protocol: str, mechanism: str, module: str) -> None:
    py, java = both(kafka(security_protocol=protocol, sasl_mechanism=mechanism,
                          sasl_username="alice", sasl_password=SECRET))
    assert py["sasl.mechanism"] == mechanism and py["security.protocol"] == protocol
    assert py["sasl.username"] == "alice" and py["sasl.password"] == SECRET
    assert java["kafka.sasl.mechanism"] == mechanism
    assert unquote_jaas(java["kafka.sasl.jaas.config"]) == {
        "__module__": module, "username": "alice", "password": SECRET}
    assert ("ssl.endpoint.identification.algorithm" in py) is (protocol == "SASL_SSL")


def test_gssapi_with_a_keytab_and_with_the_ticket_cache() -> None:
    py, java = both(kafka(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI",
                          sasl_kerberos_principal="urbpipe/h@EXAMPLE.COM",
                          sasl_kerberos_keytab="/etc/urbpipe.keytab"))
    assert py["sasl.kerberos.service.name"] == "kafka"
    assert py["sasl.kerberos.principal"] == "urbpipe/h@EXAMPLE.COM"
    assert py["sasl.kerberos.keytab"] == "/etc/urbpipe.keytab"
    assert java["kafka.sasl.kerberos.service.name"] == "kafka"
    assert unquote_jaas(java["kafka.sasl.jaas.config"]) == {
        "__module__": "com.sun.security.auth.module.Krb5LoginModule", "useKeyTab": "true",
        "storeKey": "true", "keyTab": "/etc/urbpipe.keytab",
        "principal": "urbpipe/h@EXAMPLE.COM"}
    _, java = both(kafka(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI"))
    assert unquote_jaas(java["kafka.sasl.jaas.config"])["useTicketCache"] == "true"
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_kerberos_principal is required"):
        kafka(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI",
              sasl_kerberos_keytab="/k").confluent()


def test_oauthbearer_client_credentials() -> None:
    py, java = both(kafka(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                          sasl_oauthbearer_token_endpoint_url="https://idp/token",
                          sasl_oauthbearer_client_id="urbpipe",
                          sasl_oauthbearer_client_secret=SECRET,
                          sasl_oauthbearer_scope="kafka"))
    assert py["sasl.oauthbearer.method"] == "oidc"
    assert py["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert py["sasl.oauthbearer.client.id"] == "urbpipe"
    assert py["sasl.oauthbearer.client.secret"] == SECRET
    assert py["sasl.oauthbearer.scope"] == "kafka"
    assert java["kafka.sasl.login.callback.handler.class"] == OAUTH_LOGIN_HANDLER
    assert java["kafka.sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert unquote_jaas(java["kafka.sasl.jaas.config"]) == {
        "__module__": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        "clientId": "urbpipe", "clientSecret": SECRET, "scope": "kafka"}
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_oauthbearer_client_secret"):
        kafka(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_oauthbearer_token_endpoint_url="https://idp/token",
              sasl_oauthbearer_client_id="urbpipe").spark()


# -- JAAS escaping -----------------------------------------------------------------------------

def test_jaas_escapes_quote_and_backslash() -> None:
    assert jaas_quote('a"b\\c') == '"a\\"b\\\\c"'
    entry = jaas("M", {"password": 'p"; evil=x \\', "skipped": None})
    assert entry == 'M required password="p\\"; evil=x \\\\";'
    assert unquote_jaas(entry) == {"__module__": "M", "password": 'p"; evil=x \\'}


@settings(deadline=None)  # a loaded machine must not fail a pure string round trip
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_jaas_round_trip(value: str) -> None:
    assert unquote_jaas(jaas("M", {"username": "u", "password": value}))["password"] == value


# -- secrets from files, hostname verification, pass-through ----------------------------------

def test_a_password_file_is_read_at_mapping_time_without_its_newline(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text(SECRET + "\n")
    k = kafka(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
              sasl_username="alice", sasl_password_file=str(secret))
    assert k.confluent()["sasl.password"] == SECRET
    assert unquote_jaas(k.spark()["kafka.sasl.jaas.config"])["password"] == SECRET
    secret.write_text("rotated\n\n")  # one newline stripped, the rest is the secret's
    assert k.confluent()["sasl.password"] == "rotated\n"
    secret.unlink()
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_password_file: cannot read .*pw: No"):
        k.confluent()


def test_a_value_and_its_file_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"kafka: ssl_keystore_password and "
                                          r"ssl_keystore_password_file are both given"):
        load_conf("kafka:\n  security_protocol: SSL\n  ssl_ca_location: /ca.pem\n"
                  "  ssl_keystore_location: /k.p12\n  ssl_keystore_password: x\n"
                  "  ssl_keystore_password_file: /f\n")


def test_hostname_verification_is_on_unless_turned_off() -> None:
    py, java = both(kafka(security_protocol="SSL", ssl_endpoint_identification=False))
    assert py["ssl.endpoint.identification.algorithm"] == "none"
    assert java["kafka.ssl.endpoint.identification.algorithm"] == ""


def test_pass_through_options_come_last() -> None:
    py, java = both(kafka(security_protocol="SSL", ssl_ca_location="/ca.pem",
                          client_options={"ssl.ca.location": "/other.pem", "debug": "security"},
                          java_client_options={"ssl.truststore.location": "/o.pem",
                                               "ssl.protocol": "TLSv1.3"}))
    assert py["ssl.ca.location"] == "/other.pem" and py["debug"] == "security"
    assert java["kafka.ssl.truststore.location"] == "/o.pem"
    assert java["kafka.ssl.protocol"] == "TLSv1.3"
    with pytest.raises(ConfigError, match=r"kafka\.java_client_options: .*without the kafka"):
        load_conf("kafka:\n  java_client_options:\n    kafka.ssl.protocol: TLSv1.3\n")


@pytest.mark.parametrize(("text", "message"), [
    ("kafka:\n  ssl_ca_location: /ca.pem\n", "ssl_ca_location is set but security_protocol "
                                             "PLAINTEXT does not use TLS"),
    ("kafka:\n  sasl_mechanism: PLAIN\n", "sasl_mechanism is set but security_protocol "
                                          "PLAINTEXT does not use SASL"),
    ("kafka:\n  security_protocol: SASL_SSL\n  sasl_mechanism: KERBEROS\n", "sasl_mechanism"),
    ("kafka:\n  security_protocol: SSL\n  ssl_key_location: /k.pem\n",
     "ssl_certificate_location and ssl_key_location go together"),
])
def test_inconsistent_security_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as failed:
        load_conf(text)
    assert "\n" not in str(failed.value)


def test_credentials_are_checked_when_a_client_is_made() -> None:
    k = kafka(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")  # from env later
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_username is required"):
        k.confluent()
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_password \(or sasl_password_file\)"):
        kafka(security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
              sasl_username="alice").spark()


def test_a_password_from_the_environment_stays_a_literal_string(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("kafka:\n  security_protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n"
                    "  sasl_username: alice\n")
    loaded = load_settings(conf, env={"URBPIPE__KAFKA__SASL_PASSWORD": "0123"})
    assert loaded.kafka.confluent()["sasl.password"] == "0123"


def load_conf(text: str, tmp: Path | None = None) -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        conf = Path(tmp or folder) / "c.yaml"
        conf.write_text(text)
        return load_settings(conf, env={})
