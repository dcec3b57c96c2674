"""TLS, SCRAM users and ACLs for the local broker (``devtools.local_broker.security``).

Banks and insurers run Kafka with TLS, authentication and least-privilege ACLs only; this lets
the tests and a person run the pipeline that way on one machine. At the first start
``prepare`` makes, in ``<data_dir>/secure`` (mode 0700, secrets 0600):

* a throw-away CA (``ca.pem``) and the broker's certificate (CN=broker, SAN IP:127.0.0.1 and
  DNS:localhost) in a PKCS12 keystore;
* for ``admin`` and every configured user a random SCRAM password (``<user>.password``), and
  for every configured user a client certificate CN=<user> (``<user>.pem``) whose key is
  encrypted PKCS#8 (``<user>.key``, its password in ``<user>.key.password``).

The broker then listens on a SASL_SSL port (SCRAM-SHA-512 and -256) and an SSL port that
requires a client certificate; its controller listener is SSL with client certificates too, so
the broker itself is ``User:broker`` there and on the inter-broker listener (a PLAINTEXT
controller would make ``User:ANONYMOUS`` a super user: anyone on the machine could change
ACLs through it). The SCRAM credentials are written into the metadata log by the storage
format (``scram_arguments``); the ACLs of each user's role (``acl_plan``) are made by admin
after start. ``write_client_files`` leaves the job's client settings (conf keys of the
``kafka`` section) next to them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import secrets
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml

from devtools.config import BrokerRole, LocalBroker, rig
from pipeline.config import Settings, Topics

ADMIN = "admin"
BROKER = "broker"  # the broker's own certificate principal: super user with admin
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
CLUSTER = "kafka-cluster"
#: Consumer-group prefixes the job's consumers use: Spark's Kafka source and the job's own
#: Python clients (group ids ``urbpipe-…``).
GROUP_PREFIXES = ("spark-kafka-source", "urbpipe")
#: Maps a certificate subject ``CN=<name>`` (and nothing else) to ``User:<name>``; any other
#: subject keeps its full DN as principal, which no ACL names.
PRINCIPAL_RULES = "RULE:^CN=([a-z0-9_-]+)$/$1/,DEFAULT"
Mode = Literal["scram", "mtls"]


class AclEntry(NamedTuple):
    """One ALLOW ACL for a user, in the names of Kafka's AdminClient enums."""

    resource: str   # TOPIC, GROUP, CLUSTER
    name: str
    pattern: str    # LITERAL, PREFIXED
    operation: str  # READ, WRITE, DESCRIBE


# -- the ACL plan (pure) -----------------------------------------------------------------------

def _topic_acls(names: list[str], operations: tuple[str, ...]) -> list[AclEntry]:
    return [AclEntry("TOPIC", n, "LITERAL", op) for n in dict.fromkeys(names) for op in operations]


def _without_groups(pattern: str) -> str:
    """``pattern`` with its (innermost first) parenthesised groups removed."""
    while True:
        shorter = re.sub(r"\([^()]*\)", "", pattern)
        if shorter == pattern:
            return pattern
        pattern = shorter


def _pattern_prefix(topics: Topics) -> list[str]:
    """The literal start of ``output_pattern`` (up to its first regex character): ACLs cannot
    hold a regex, so topics it matches are covered by a PREFIXED ACL on that start."""
    if not topics.output_pattern or "|" in _without_groups(topics.output_pattern):
        return []  # an alternative at the top: no common start
    prefix, rest = "", topics.output_pattern.removeprefix("^")
    while rest:
        if rest[0] == "\\" and len(rest) > 1 and not rest[1].isalnum():  # \. is a dot
            prefix, rest = prefix + rest[1], rest[2:]
        elif rest[0] in ".^$*+?{}[]\\|()" or (rest[1:2] in ("*", "?", "{")):
            break  # a character that a quantifier after it may leave out is no prefix either
        else:
            prefix, rest = prefix + rest[0], rest[1:]
    return [prefix] if prefix else []


def acl_plan(topics: Topics, role: BrokerRole) -> list[AclEntry]:
    """The ACLs of a role, from the conf's topics.

    ``job``: reads the output, reply and control topics, writes requests and alerts, reads its
    consumer groups (by prefix). ``reader``: the job's ACLs without any WRITE (the tests'
    "missing WRITE ACL" user). ``replicator`` (the simulator, or a replicator's Kafka
    connection): writes the output and reply topics, reads requests.
    """
    def pattern(operations: tuple[str, ...]) -> list[AclEntry]:
        return [AclEntry("TOPIC", p, "PREFIXED", op) for p in _pattern_prefix(topics)
                for op in operations]

    if role == "replicator":
        return [*_topic_acls([*topics.outputs, topics.replies], ("WRITE", "DESCRIBE")),
                *pattern(("WRITE", "DESCRIBE")),
                *_topic_acls([topics.requests], ("READ", "DESCRIBE")),
                AclEntry("GROUP", "urbpipe", "PREFIXED", "READ")]
    writes = ("WRITE", "DESCRIBE") if role == "job" else ("DESCRIBE",)
    return [*_topic_acls([*topics.outputs, topics.replies, topics.control], ("READ", "DESCRIBE")),
            *pattern(("READ", "DESCRIBE")),
            *_topic_acls([topics.requests, topics.alerts], writes),
            *[AclEntry("GROUP", g, "PREFIXED", "READ") for g in GROUP_PREFIXES]]


def user_acls(settings: Settings) -> list[tuple[str, AclEntry]]:
    """(user, ACL) for every configured user; admin needs none (super user)."""
    sec = rig(settings).local_broker.security
    return [(user, e) for user, role in sec.users.items() for e in acl_plan(settings.topics, role)]


# -- server.properties (pure) ------------------------------------------------------------------

def listener_properties(lb: LocalBroker, secure: Path, keystore_password: str) -> list[str]:
    """The listener, TLS, SASL and authorizer lines of a secured broker's server.properties."""
    sec = lb.security
    clients = f"SASL_SSL://127.0.0.1:{sec.sasl_ssl_port},SSL://127.0.0.1:{sec.ssl_port}"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return [
        f"listeners={clients},CONTROLLER://127.0.0.1:{lb.controller_port}",
        f"advertised.listeners={clients}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name=SSL",
        f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        *[f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config={scram}" for m in SCRAM_MECHANISMS],
        "listener.name.ssl.ssl.client.auth=required",
        "listener.name.controller.ssl.client.auth=required",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={secure / 'broker.p12'}",
        f"ssl.keystore.password={keystore_password}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={secure / 'ca.pem'}",
        f"ssl.principal.mapping.rules={PRINCIPAL_RULES}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        f"super.users=User:{ADMIN};User:{BROKER}",
    ]


def listeners(lb: LocalBroker) -> str:
    """The client listeners, as ``status`` and ``start`` show them."""
    if not lb.security.enabled:
        return f"127.0.0.1:{lb.port}"  # the same line as before security existed
    return (f"SASL_SSL://127.0.0.1:{lb.security.sasl_ssl_port} (SCRAM), "
            f"SSL://127.0.0.1:{lb.security.ssl_port} (client certificate)")


# -- secrets and certificates ------------------------------------------------------------------

def write_secret(path: Path, data: bytes) -> None:
    """Write a file only its owner can read (created 0600, never briefly world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)


def _password(path: Path) -> str:
    """The password in ``path``, made (random, 0600) if missing: one per data dir."""
    if not path.exists():
        write_secret(path, secrets.token_hex(24).encode())
    return path.read_text().strip()


def scram_users(lb: LocalBroker) -> list[str]:
    return [ADMIN, *lb.security.users]


def passwords(lb: LocalBroker, secure: Path) -> dict[str, str]:
    """SCRAM password of admin and every configured user (made at the first start)."""
    return {u: _password(secure / f"{u}.password") for u in scram_users(lb)}


def keystore_password(secure: Path) -> str:
    return _password(secure / "broker.keystore.password")


def scram_arguments(users: dict[str, str]) -> list[str]:
    """``kafka-storage format`` arguments that put the users' SCRAM credentials (both
    mechanisms) into the metadata log: KRaft has no other store for them before start."""
    return [arg for user, pw in users.items() for mech in SCRAM_MECHANISMS
            for arg in ("--add-scram", f"{mech}=[name={user},password={pw}]")]


def _name(cn: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _certificate(cn: str, key: Any, issuer: tuple[Any, Any] | None, days: int, *,
                 usage: list[Any], san: list[Any] | None = None):
    """An X.509 certificate for ``key``, signed by ``issuer`` (cert, key); self-signed CA if
    None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = dt.datetime.now(dt.UTC)
    issuer_name, signer = (issuer[0].subject, issuer[1]) if issuer else (_name(cn), key)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False))
    if issuer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
            critical=False).add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(signer, hashes.SHA256())


def certificates_fresh(secure: Path, users: list[str], min_days: float = 1.0) -> bool:
    """Do the CA, broker and user certificates exist and stay valid for ``min_days``?"""
    from cryptography import x509

    files = [secure / "ca.pem", secure / "broker.p12", *(secure / f"{u}.pem" for u in users)]
    if not all(f.exists() for f in files):
        return False
    cert = x509.load_pem_x509_certificate((secure / "ca.pem").read_bytes())
    left = cert.not_valid_after_utc - dt.datetime.now(dt.UTC)
    return left > dt.timedelta(days=min_days) and all(
        x509.load_pem_x509_certificate((secure / f"{u}.pem").read_bytes()).not_valid_after_utc
        - dt.datetime.now(dt.UTC) > dt.timedelta(days=min_days) for u in users)


def make_certificates(secure: Path, users: list[str], days: int, store_password: str) -> None:
    """A new CA, the broker's PKCS12 keystore and a client certificate per user (encrypted
    PKCS#8 key, password in ``<user>.key.password``). EC P-256: fast to make, read by Java
    and librdkafka alike."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID as Eku

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("urbpipe local broker CA", ca_key, None, days * 4, usage=[])
    write_secret(secure / "ca.key", ca_key.private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()))
    (secure / "ca.pem").write_bytes(ca.public_bytes(ser.Encoding.PEM))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(BROKER, key, (ca, ca_key), days,
                        usage=[Eku.SERVER_AUTH, Eku.CLIENT_AUTH],  # client on its controller
                        san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                             x509.DNSName("localhost")])
    write_secret(secure / "broker.p12", pkcs12.serialize_key_and_certificates(
        BROKER.encode(), key, cert, [ca], ser.BestAvailableEncryption(store_password.encode())))
    for user in users:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(user, key, (ca, ca_key), days, usage=[Eku.CLIENT_AUTH])
        key_password = _password(secure / f"{user}.key.password")
        write_secret(secure / f"{user}.key", key.private_bytes(
            ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
            ser.BestAvailableEncryption(key_password.encode())))
        (secure / f"{user}.pem").write_bytes(cert.public_bytes(ser.Encoding.PEM))


def prepare(lb: LocalBroker, secure: Path) -> tuple[dict[str, str], str]:
    """Make what is missing in ``secure`` (passwords, certificates; certificates again when
    they expire within a day). Returns the SCRAM passwords and the keystore password."""
    secure.mkdir(parents=True, exist_ok=True)
    secure.chmod(0o700)
    users = passwords(lb, secure)
    store = keystore_password(secure)
    if not certificates_fresh(secure, list(lb.security.users)):
        make_certificates(secure, list(lb.security.users), lb.security.cert_days, store)
    return users, store


# -- client settings ---------------------------------------------------------------------------

def secure_client(settings: Settings, secure: Path, user: str = "job",
                  mode: Mode = "scram") -> dict[str, str]:
    """The ``kafka`` conf keys a client of the secured local broker needs: SCRAM over SASL_SSL,
    or a client certificate (mutual TLS). Secrets are named by file, never included."""
    sec = rig(settings).local_broker.security
    if user != ADMIN and user not in sec.users:
        raise ValueError(f"user {user!r} is not in devtools.local_broker.security.users")
    ca = str(secure / "ca.pem")
    if mode == "scram":
        return {"bootstrap_servers": f"127.0.0.1:{sec.sasl_ssl_port}",
                "security_protocol": "SASL_SSL", "sasl_mechanism": SCRAM_MECHANISMS[0],
                "sasl_username": user, "sasl_password_file": str(secure / f"{user}.password"),
                "ssl_ca_location": ca}
    if user == ADMIN:
        raise ValueError("admin has no client certificate: use mode scram")
    return {"bootstrap_servers": f"127.0.0.1:{sec.ssl_port}", "security_protocol": "SSL",
            "ssl_ca_location": ca, "ssl_certificate_location": str(secure / f"{user}.pem"),
            "ssl_key_location": str(secure / f"{user}.key"),
            "ssl_key_password_file": str(secure / f"{user}.key.password")}


def write_client_files(settings: Settings, secure: Path, user: str = "job") -> list[Path]:
    """``client-scram.yaml`` and ``client-mtls.yaml``: a ``kafka:`` section for the job."""
    written = []
    for mode in ("scram", "mtls"):
        path = secure / f"client-{mode}.yaml"
        body = yaml.safe_dump({"kafka": secure_client(settings, secure, user, mode)},
                              sort_keys=False)
        path.write_text(f"# {user} on the secured local broker ({mode}); made by "
                        f"`python -m devtools.broker start`\n{body}")
        written.append(path)
    return written


def create_acls(admin: Any, settings: Settings, timeout_s: float = 30.0) -> int:
    """Create every user's ACLs as admin (creating one that exists is a no-op). Returns how
    many were asked for."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [AclBinding(ResourceType[e.resource], e.name, ResourcePatternType[e.pattern],
                           f"User:{user}", "*", AclOperation[e.operation],
                           AclPermissionType.ALLOW) for user, e in user_acls(settings)]
    for fut in admin.create_acls(bindings, request_timeout=timeout_s).values():
        fut.result(timeout=timeout_s)
    return len(bindings)
