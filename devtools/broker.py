"""The local single-node Apache Kafka broker (KRaft mode), run from its Maven Central jars.

Used by the demo, the tests and the benchmarks on machines without Docker. ``start`` formats the
storage the first time, launches the broker in its own session, waits until it answers and
creates the topics named in conf; starting twice is harmless. ``stop`` ends it by the PID it
wrote. Everything lives in ``devtools.local_broker.data_dir`` (git-ignored). With
``devtools.local_broker.security.enabled`` the broker takes TLS, SCRAM or client certificates and
ACLs only (devtools/broker_security.py); its CA, passwords and the job's client settings
land in ``<data_dir>/secure``.

    python -m devtools.broker start|stop|status|topics [--conf-file conf/local.yaml]

``topics`` only creates the configured topics on ``kafka.bootstrap_servers`` (any cluster, e.g.
the Kafka service of docker-compose.yml), waiting until it answers.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from devtools import broker_security as sec
from devtools.config import rig
from pipeline.config import ConfigError, Kafka, Settings, load_settings
from pipeline.ops.topic_check import partition_counts, problem, source_partitions
from pipeline.pidfile import running_pid

JARS_DIR = ".jars/kafka"
START_TIMEOUT_S = 90.0


class BrokerError(RuntimeError):
    """A one-line, operator-readable reason the broker could not be started or stopped."""


def _home(settings: Settings) -> Path:
    return Path(settings.location(rig(settings).local_broker.data_dir))


def _pid_file(settings: Settings) -> Path:
    return _home(settings) / "broker.pid"


def _running_pid(settings: Settings) -> int | None:
    return running_pid(_pid_file(settings))


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def secure_dir(settings: Settings) -> Path:
    """Where a secured broker's CA, certificates, passwords and client settings live."""
    return _home(settings) / "secure"


def _client_ports(settings: Settings) -> tuple[int, ...]:
    lb = rig(settings).local_broker
    if lb.security.enabled:
        return lb.security.sasl_ssl_port, lb.security.ssl_port
    return (lb.port,)


def _listener_lines(settings: Settings, keystore_password: str | None) -> list[str]:
    lb = rig(settings).local_broker
    if lb.security.enabled:
        if keystore_password is None:
            raise BrokerError("a secured broker's server.properties needs its keystore password")
        return sec.listener_properties(lb, secure_dir(settings), keystore_password)
    return [
        f"listeners=PLAINTEXT://127.0.0.1:{lb.port},CONTROLLER://127.0.0.1:{lb.controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{lb.port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
    ]


def _server_properties(settings: Settings, keystore_password: str | None = None) -> str:
    """The broker's server.properties; a secured one names its keystore password, so the file
    is written 0600."""
    lb = rig(settings).local_broker
    home = _home(settings)
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{lb.controller_port}",
        *_listener_lines(settings, keystore_password),
        f"log.dirs={home / 'data'}",
        f"num.partitions={lb.partitions}",
        "offsets.topic.replication.factor=1",
        "share.coordinator.state.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        f"message.max.bytes={lb.max_message_bytes}",
        f"replica.fetch.max.bytes={lb.max_message_bytes}",
        "auto.create.topics.enable=false",
        "log.retention.hours=168",
        "",
    ])


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
"""


def _java(settings: Settings, main: str, *args: str, **popen: object) -> list[str]:
    jars = Path(settings.location(JARS_DIR))
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"broker jars missing in {jars}: run `make jars` first")
    home = _home(settings)
    return ["java", f"-Xmx{rig(settings).local_broker.heap}",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={home / 'logs'}", "-cp", f"{jars}/*", main, *args]


def new_cluster_id() -> str:
    """A KRaft cluster id (base64url of a UUID) that does not start with '-': the storage
    tool would read such an id as an option (about 1 start in 64 failed that way)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(settings: Settings, props: Path,
                    scram: dict[str, str] | None = None) -> None:
    """Format KRaft storage once; meta.properties marks a formatted log directory. ``scram``
    (user → password): SCRAM credentials written into the metadata log at format time, the
    only way a KRaft broker has them before its first start (never shown in an error)."""
    if (_home(settings) / "data" / "meta.properties").exists():
        return
    cluster_id = new_cluster_id()
    cmd = _java(settings, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                "-c", str(props), "--ignore-formatted", *sec.scram_arguments(scram or {}))
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        for password in (scram or {}).values():
            last = [line.replace(password, "***") for line in last]
        raise BrokerError(f"formatting broker storage failed: {last[0]}")


def _admin(settings: Settings):
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("urbpipe.kafka.admin")
    quiet.setLevel(logging.CRITICAL)  # connection-refused chatter while the broker starts
    return AdminClient({**_admin_options(settings), "socket.timeout.ms": "3000"}, logger=quiet)


def _admin_options(settings: Settings) -> dict[str, str]:
    """The broker's own admin connection: ``kafka`` from conf, or admin over SCRAM for a
    secured local broker (its topics and ACLs are made as admin)."""
    if rig(settings).local_broker.security.enabled:
        admin = sec.secure_client(settings, secure_dir(settings), sec.ADMIN)
        return Kafka.model_validate(admin).confluent()  # the job's own mapping
    return settings.kafka.confluent()


def secure_client(settings: Settings, user: str = "job",
                  mode: sec.Mode = "scram") -> dict[str, str]:
    """A secured local broker's client settings for ``user`` (``kafka`` conf keys; secrets
    named by file): ``mode`` scram (SASL_SSL) or mtls (client certificate)."""
    return sec.secure_client(settings, secure_dir(settings), user, mode)


def wait_until_ready(settings: Settings, timeout_s: float = START_TIMEOUT_S, *,
                     check_process: bool = True) -> None:
    """Poll the broker's metadata until it answers, printing progress to stderr."""
    deadline = time.monotonic() + timeout_s
    admin = _admin(settings)
    while True:
        try:
            admin.list_topics(timeout=3)
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise BrokerError(f"broker did not answer within {timeout_s:.0f}s: {exc}") from None
            if check_process and _running_pid(settings) is None:
                raise BrokerError("broker process exited during start; see "
                                  f"{_home(settings) / 'logs' / 'broker.log'}") from None
            print("  waiting for the broker to answer…", file=sys.stderr)
            time.sleep(1.5)


def create_topics(settings: Settings, fix_partitions: bool = False) -> list[str]:
    """Create the topics named in conf (idempotent). Returns the ones newly created.

    The topics the job reads (outputs, replies, control) get one partition: the job refuses
    any with more (pipeline/ops/topic_check.py says why); requests and alerts get
    ``local_broker.partitions``. ``fix_partitions`` (the project's own broker and the demo's
    reset only: their topics hold nothing worth keeping): a source topic an older version made
    with several partitions is deleted and made again with one."""
    admin = _admin(settings)
    sources = set(settings.source_topics())
    counts = partition_counts(admin.list_topics(timeout=10))
    stale = sorted(t for t in sources if (counts.get(t) or 0) > 1) if fix_partitions else []
    if stale:
        print(f"  recreating {', '.join(stale)} with one partition (an older version made "
              "them with more)", file=sys.stderr)
        for fut in admin.delete_topics(stale, operation_timeout=30).values():
            fut.result(timeout=30)
    wanted = [t for t in settings.topics.all_created() if t not in counts or t in stale]
    _create(settings, admin, wanted, remade=set(stale))
    return wanted


def _create(settings: Settings, admin: Any, topics: list[str], remade: set[str],
            timeout_s: float = 30.0) -> None:
    """Create ``topics``; one that exists already is fine, unless it is one just deleted
    (``remade``): its deletion may not have settled yet, so ask again until it is made."""
    from confluent_kafka.admin import NewTopic

    lb = rig(settings).local_broker
    sources = set(settings.source_topics())
    config = {"max.message.bytes": str(lb.max_message_bytes)}
    deadline = time.monotonic() + timeout_s
    pending = list(topics)
    while pending:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=1 if t in sources else lb.partitions,
                      replication_factor=1, config=config) for t in pending])
        pending = []
        for topic, fut in futures.items():
            try:
                fut.result(timeout=30)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise BrokerError(f"cannot create topic {topic}: {exc}") from None
                if topic in remade:
                    pending.append(topic)
        if pending:  # made again meanwhile (another start): fine once it has one partition
            now = partition_counts(admin.list_topics(timeout=10))
            pending = [t for t in pending if now.get(t) != 1]
        if pending and time.monotonic() > deadline:
            raise BrokerError(
                f"could not make {', '.join(pending)} again with one partition within "
                f"{timeout_s:g} s; stop the broker, delete {_home(settings)} and run "
                "`python -m devtools.broker start` again")
        if pending:
            time.sleep(0.5)
    _wait_visible(admin, topics, deadline)


def _wait_visible(admin: Any, topics: list[str], deadline: float) -> None:
    """Until every topic made is in the broker's metadata. Why: a created topic's future
    resolves once the controller took it; the broker's metadata (what the job's start check,
    `urbpipe status` and the Kafka source read) may lag behind, and a topic just made again
    with one partition was then missing from the listing right after `broker start`."""
    missing = list(topics)
    while missing:
        listed = partition_counts(admin.list_topics(timeout=10))
        missing = [t for t in missing if t not in listed]
        if missing and time.monotonic() > deadline:
            raise BrokerError(f"topics {', '.join(missing)} made but not listed by the broker")
        if missing:
            time.sleep(0.2)


def ensure_topics(settings: Settings) -> str:
    """Wait for the configured cluster and create the configured topics (no local broker).
    A source topic there with several partitions is never deleted (it may hold data the
    replicator cannot send again): the status line says what is wrong."""
    wait_until_ready(settings, check_process=False)
    created = create_topics(settings)
    line = f"topics created: {', '.join(created) or 'none (all existed)'}"
    wrong = problem(source_partitions(settings, partition_counts(
        _admin(settings).list_topics(timeout=10))))
    return f"{line}\nwarning: {wrong}" if wrong else line


def _secure_files(settings: Settings) -> tuple[dict[str, str] | None, str | None]:
    """For a secured broker: make its CA, certificates and passwords if missing; returns the
    SCRAM passwords and the keystore password (None, None for a PLAINTEXT broker). Storage
    formatted without security has no SCRAM users, so it is refused with what to do."""
    if not rig(settings).local_broker.security.enabled:
        return None, None
    secure = secure_dir(settings)
    formatted = (_home(settings) / "data" / "meta.properties").exists()
    if formatted and not (secure / f"{sec.ADMIN}.password").exists():
        raise BrokerError(f"{_home(settings)} was formatted without security (no SCRAM users): "
                          "stop the broker, delete it (or choose another "
                          "devtools.local_broker.data_dir) and start again")
    return sec.prepare(rig(settings).local_broker, secure)


def _after_start(settings: Settings) -> list[str]:
    """Topics, and for a secured broker the users' ACLs and the job's client files."""
    created = create_topics(settings, fix_partitions=True)
    if not rig(settings).local_broker.security.enabled:
        return created
    sec.create_acls(_admin(settings), settings)
    sec.write_client_files(settings, secure_dir(settings))
    return created


def start(settings: Settings) -> str:
    """Start (or find running) the broker and ensure its topics. Returns a status line."""
    lb = rig(settings).local_broker
    where = sec.listeners(lb)
    if _running_pid(settings) is not None:
        wait_until_ready(settings)
        _after_start(settings)
        return f"broker already running on {where} (pid {_running_pid(settings)})"
    for port in (*_client_ports(settings), lb.controller_port):
        if _port_taken(port):
            raise BrokerError(f"port {port} on 127.0.0.1 is taken by another process; free it "
                              "or change devtools.local_broker's ports")
    home = _home(settings)
    (home / "logs").mkdir(parents=True, exist_ok=True)
    scram, store_password = _secure_files(settings)
    props = home / "server.properties"
    sec.write_secret(props, _server_properties(settings, store_password).encode())
    (home / "log4j2.properties").write_text(_LOG4J2.format(log=home / "logs" / "broker.log"))
    _format_storage(settings, props, scram)
    out = (home / "logs" / "stdout.log").open("ab")
    proc = subprocess.Popen(_java(settings, "kafka.Kafka", str(props)), stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    _pid_file(settings).write_text(str(proc.pid))
    wait_until_ready(settings)
    created = _after_start(settings)
    secured = f"; client settings in {secure_dir(settings)}" if scram else ""
    return (f"broker started on {where} (pid {proc.pid}); "
            f"topics created: {', '.join(created) or 'none (all existed)'}{secured}")


def _gone(pid: int, settings: Settings) -> bool:
    """Has the broker exited? Collects its exit status first if this process started it (a
    test fixture does): an unreaped child stays a zombie that still answers kill(pid, 0), so
    ``stop`` would wait its whole timeout and then SIGKILL a broker that had shut down."""
    with contextlib.suppress(ChildProcessError):  # not our child: init reaps it
        os.waitpid(pid, os.WNOHANG)
    return _running_pid(settings) is None


def stop(settings: Settings, timeout_s: float = 30.0) -> str:
    """Stop the broker by its PID: SIGTERM, then SIGKILL after timeout_s."""
    pid = _running_pid(settings)
    if pid is None:
        _pid_file(settings).unlink(missing_ok=True)
        return "broker not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not _gone(pid, settings) and time.monotonic() < deadline:
        time.sleep(0.3)
    if not _gone(pid, settings):
        os.kill(pid, signal.SIGKILL)
    _pid_file(settings).unlink(missing_ok=True)
    return f"broker stopped (pid {pid})"


def status(settings: Settings) -> str:
    """One line: running or not, and on which listeners."""
    pid = _running_pid(settings)
    where = sec.listeners(rig(settings).local_broker)
    return f"broker running on {where} (pid {pid})" if pid else "broker not running"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.broker",
                                     description="Start/stop the local KRaft Kafka broker.")
    parser.add_argument("action", choices=["start", "stop", "status", "topics"])
    parser.add_argument("--conf-file", default=None, help="YAML configuration (conf/local.yaml)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.conf_file)
        action = {"start": start, "stop": stop, "status": status, "topics": ensure_topics}[
            args.action]
        print(action(settings))
    except (ConfigError, BrokerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
