"""The secured local broker's pure parts: the ACL plan (and the table of conf/README.md that
documents it), the generated server.properties, the storage-format SCRAM arguments, the client
settings and the conf checks. The broker itself is tests/e2e/test_secure_broker.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from devtools import broker
from devtools import broker_security as sec
from devtools.broker_security import AclEntry, acl_plan
from devtools.config import BrokerSecurity, LocalBroker, rig
from pipeline.config import Settings, Topics

ROOT = Path(__file__).resolve().parents[3]
TOPICS = Topics(outputs={"urb.out1": "OUT1", "urb.out2": "OUT2"},
                output_pattern=r"^urb\.more\..*", pattern_destination="MORE")


def _secured(tmp: str = "/data/kafka", **security: object) -> Settings:
    broker = LocalBroker(port=19393, controller_port=19392, data_dir=tmp,
                         security=BrokerSecurity(enabled=True, sasl_ssl_port=19394,
                                                 ssl_port=19395, **security))
    return Settings(devtools={"local_broker": broker.model_dump()})


def _readme_plan(role: str, topics: Topics) -> set[AclEntry]:
    """The ACLs conf/README.md's table gives ``role``, its names resolved against ``topics``."""
    text = (ROOT / "conf" / "README.md").read_text()
    rows = re.findall(r"^\| (job|reader|replicator) \| (\w+) \| ([^|]+) \| (\w+) \| ([^|]+) \|$",
                      text, flags=re.M)
    assert rows, "the ACL table is missing from conf/README.md"
    plan = set()
    for who, resource, names, pattern, operations in rows:
        if who != role:
            continue
        for name in (n.strip() for n in names.split(",")):
            if name == "start of `output_pattern`":
                resolved = sec._pattern_prefix(topics)
            elif name.startswith("`"):
                value = getattr(topics, name.strip("`"))
                resolved = list(value) if isinstance(value, dict) else [value]
            else:
                resolved = [name]
            plan |= {AclEntry(resource, n, pattern, op.strip())
                     for n in resolved for op in operations.split(",")}
    return plan


@pytest.mark.parametrize("role", ["job", "reader", "replicator"])
def test_the_readme_table_is_the_acl_plan(role: str) -> None:
    plan = acl_plan(TOPICS, role)  # type: ignore[arg-type]
    assert len(plan) == len(set(plan))
    assert set(plan) == _readme_plan(role, TOPICS)


def test_the_job_reads_its_sources_and_writes_requests_and_alerts_only() -> None:
    plan = acl_plan(Topics(), "job")
    assert sorted((e.name, e.operation) for e in plan if e.resource == "TOPIC") == [
        ("urb.alerts", "DESCRIBE"), ("urb.alerts", "WRITE"),
        ("urb.control", "DESCRIBE"), ("urb.control", "READ"),
        ("urb.out1", "DESCRIBE"), ("urb.out1", "READ"),
        ("urb.replies", "DESCRIBE"), ("urb.replies", "READ"),
        ("urb.requests", "DESCRIBE"), ("urb.requests", "WRITE")]
    assert [e for e in plan if e.resource != "TOPIC"] == [
        AclEntry("GROUP", "spark-kafka-source", "PREFIXED", "READ"),
        AclEntry("GROUP", "urbpipe", "PREFIXED", "READ")]
    assert all(e.pattern == "LITERAL" for e in plan if e.resource == "TOPIC")


def test_a_reader_has_the_jobs_acls_without_write() -> None:
    job, reader = acl_plan(TOPICS, "job"), acl_plan(TOPICS, "reader")
    assert set(reader) == {e for e in job if e.operation != "WRITE"}


@pytest.mark.parametrize(("pattern", "prefix"), [
    (r"^urb\.more\..*", ["urb.more."]), ("urb.x", ["urb"]), ("abc?", ["ab"]),
    (r"urb\.(a|b)", ["urb."]), ("abc|xyz", []), (r"\d+", []), (".*", [])])
def test_an_output_patterns_literal_start_is_its_acl_prefix(pattern: str,
                                                             prefix: list[str]) -> None:
    assert sec._pattern_prefix(Topics(output_pattern=pattern, pattern_destination="X")) == prefix


def test_user_acls_cover_every_configured_user() -> None:
    users = {u for u, _ in sec.user_acls(_secured())}
    assert users == {"job", "replicator", "nowrite"}


def test_secured_server_properties() -> None:
    settings = _secured()
    props = dict(line.split("=", 1) for line in
                 broker._server_properties(settings, "store-pw").splitlines() if line)
    secure = "/data/kafka/secure"
    assert props["listeners"] == ("SASL_SSL://127.0.0.1:19394,SSL://127.0.0.1:19395,"
                                  "CONTROLLER://127.0.0.1:19392")
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:19394,SSL://127.0.0.1:19395"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL"
    assert props["inter.broker.listener.name"] == "SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256"
    for mech in ("scram-sha-512", "scram-sha-256"):
        assert props[f"listener.name.sasl_ssl.{mech}.sasl.jaas.config"] == (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    assert props["listener.name.ssl.ssl.client.auth"] == "required"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert "ssl.client.auth" not in props  # SCRAM clients need no certificate
    assert props["ssl.keystore.location"] == f"{secure}/broker.p12"
    assert props["ssl.keystore.password"] == "store-pw"
    assert props["ssl.truststore.type"] == "PEM"
    assert props["ssl.truststore.location"] == f"{secure}/ca.pem"
    assert props["ssl.principal.mapping.rules"] == "RULE:^CN=([a-z0-9_-]+)$/$1/,DEFAULT"
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin;User:broker"
    assert "PLAINTEXT" not in "".join(props.values())


def test_plaintext_server_properties_are_as_before() -> None:
    text = broker._server_properties(Settings())
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in text
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" in text
    assert not re.search(r"ssl|sasl|authorizer|super\.users", text)


def test_a_secured_server_properties_needs_the_keystore_password() -> None:
    with pytest.raises(broker.BrokerError, match="keystore password"):
        broker._server_properties(_secured())


def test_scram_arguments_give_both_mechanisms_per_user() -> None:
    assert sec.scram_arguments({"admin": "a1", "job": "j2"}) == [
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=a1]",
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=a1]",
        "--add-scram", "SCRAM-SHA-512=[name=job,password=j2]",
        "--add-scram", "SCRAM-SHA-256=[name=job,password=j2]"]


def test_client_settings_name_secrets_by_file_only(tmp_path: Path) -> None:
    settings = _secured(str(tmp_path))
    secure = tmp_path / "secure"
    assert broker.secure_client(settings) == {
        "bootstrap_servers": "127.0.0.1:19394", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "job",
        "sasl_password_file": f"{secure}/job.password", "ssl_ca_location": f"{secure}/ca.pem"}
    assert broker.secure_client(settings, "nowrite", "mtls") == {
        "bootstrap_servers": "127.0.0.1:19395", "security_protocol": "SSL",
        "ssl_ca_location": f"{secure}/ca.pem",
        "ssl_certificate_location": f"{secure}/nowrite.pem",
        "ssl_key_location": f"{secure}/nowrite.key",
        "ssl_key_password_file": f"{secure}/nowrite.key.password"}
    with pytest.raises(ValueError, match=r"not in devtools\.local_broker\.security\.users"):
        broker.secure_client(settings, "mallory")
    with pytest.raises(ValueError, match="admin has no client certificate"):
        broker.secure_client(settings, "admin", "mtls")


def test_the_admin_connection_goes_through_the_jobs_mapping_and_reads_the_password_file(
        tmp_path: Path) -> None:
    settings = _secured(str(tmp_path))
    secure = broker.secure_dir(settings)
    secure.mkdir(parents=True)
    (secure / "admin.password").write_text("s3cret\n")
    opts = broker._admin_options(settings)
    assert opts["sasl.username"] == "admin" and opts["sasl.password"] == "s3cret"
    assert opts["ssl.ca.location"] == str(secure / "ca.pem")
    assert opts["security.protocol"] == "SASL_SSL" and opts["sasl.mechanism"] == "SCRAM-SHA-512"


def test_secrets_are_written_owner_only(tmp_path: Path) -> None:
    users, store = sec.prepare(rig(_secured(str(tmp_path))).local_broker, tmp_path / "secure")
    assert set(users) == {"admin", "job", "replicator", "nowrite"}
    assert len(set(users.values())) == 4 and store not in users.values()
    again, _ = sec.prepare(rig(_secured(str(tmp_path))).local_broker, tmp_path / "secure")
    assert again == users  # one password per data dir
    assert (tmp_path / "secure").stat().st_mode & 0o777 == 0o700
    for name in ("admin.password", "ca.key", "broker.p12", "job.key", "job.key.password"):
        assert (tmp_path / "secure" / name).stat().st_mode & 0o777 == 0o600, name
    assert sec.certificates_fresh(tmp_path / "secure", ["job"])
    assert not sec.certificates_fresh(tmp_path / "secure", ["job"], min_days=31)


@pytest.mark.parametrize(("security", "message"), [
    ({"users": {"admin": "job"}}, "other than admin and broker"),
    ({"users": {"Job": "job"}}, "lower-case name"),
    ({"users": {"job": "owner"}}, "users.job"),
])
def test_bad_security_settings_are_refused(security: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BrokerSecurity(enabled=True, **security)


def test_the_secured_ports_must_differ_from_the_controllers() -> None:
    with pytest.raises(ValidationError, match="ports must differ"):
        LocalBroker(controller_port=9094, security=BrokerSecurity(enabled=True))
    LocalBroker(controller_port=9094)  # PLAINTEXT: the unused secured ports do not count
