"""Shared fixtures: test settings, the real local broker and a real Spark + Delta session.

A test's tier is its top folder: tests/unit (engine-free, ``unit``), tests/spark (``spark``),
tests/e2e (``e2e``), tests/faults (``e2e`` and ``faults``); the benchmarks' own tests
(benchmarks/tests) are ``unit``. The harness, builders and oracle every tier and the benchmarks
share are tests/support. The broker fixture starts the project's own KRaft
broker from conf/test.yaml (port 19092) if it is not running and stops it at the end if it
started it (in an xdist worker it leaves it running: ``make test`` stops it). ``s3_server`` is
an S3-compatible server (moto's server mode) on 127.0.0.1 with one bucket, for ``s3a://``
lakes.

``make test`` runs the Spark and end-to-end tier in two pytest-xdist workers
(``--dist loadfile``, decision 0016): each test module is one unit of work, so its module
fixtures (a scenario's job run, the cluster) are made once, on one worker; modules that share a
fixed-port server (the secured broker) are one unit together (``pytest_xdist_make_scheduler``).
Each worker has its own Spark session; both share the test broker, which ``make test`` starts
before them.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
TEST_CONF = ROOT / "conf" / "test.yaml"


#: A test's tier is the top folder it sits in, nothing else (a module never sets its own).
TIERS = {"unit": ("unit",), "spark": ("spark",), "e2e": ("e2e",), "faults": ("e2e", "faults")}
TIER_MARKS = {"unit", "spark", "e2e", "faults"}


def tier_of(path: Path) -> tuple[str, ...]:
    """``tests/<tier>/…`` → its marks; the benchmarks' own tests (``benchmarks/tests``) are
    engine-free. Anything else is a test outside the tree: an error that says where to put it."""
    parts = path.relative_to(ROOT).parts
    if parts[:2] == ("benchmarks", "tests"):
        return TIERS["unit"]
    if parts[0] == "tests" and len(parts) > 2 and parts[1] in TIERS:
        return TIERS[parts[1]]
    raise pytest.UsageError(f"{path}: a test belongs under tests/{{{','.join(TIERS)}}}/ or "
                            "benchmarks/tests/ (its tier is its top folder)")


#: modules whose session fixture binds fixed ports: one xdist unit of work together
SHARED_PORTS = {"tests/e2e/test_secure_broker.py": "secured-broker",
                "tests/e2e/test_secure_job.py": "secured-broker"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``, xdist's file scheduling with the modules of ``SHARED_PORTS``
    as one unit (xdist's own ``loadgroup`` marks do not reach pytest 9's node ids)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return SHARED_PORTS.get(module, module)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marks = tier_of(Path(str(item.fspath)))
        own = {m.name for m in item.iter_markers()} & TIER_MARKS
        if own - set(marks):
            raise pytest.UsageError(f"{item.nodeid}: marks {sorted(own)} itself; its tier comes "
                                    f"from its folder ({', '.join(marks)})")
        for mark in marks:
            item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(scope="session")
def test_settings() -> Settings:
    return load_settings(TEST_CONF, env={})


@pytest.fixture(scope="session")
def kafka_bootstrap(test_settings: Settings) -> Iterator[str]:
    """Bootstrap address of the real local broker (started here if needed)."""
    from devtools import broker

    lock = ROOT / ".run" / "test-broker.lock"  # two xdist workers: one starts it
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        was_running = broker.status(test_settings).startswith("broker running")
        broker.start(test_settings)
    yield test_settings.kafka.bootstrap_servers
    if not was_running and "PYTEST_XDIST_WORKER" not in os.environ:  # a worker's peer may
        broker.stop(test_settings)                                   # still use it


@pytest.fixture
def fresh_topic(kafka_bootstrap: str, test_settings: Settings) -> Iterator[str]:
    """A new, empty topic (2 partitions) for one test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"t.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(test_settings.kafka.confluent())
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(30)
    yield name
    admin.delete_topics([name])


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The project's broker secured (``devtools.local_broker.security``): SASL_SSL with SCRAM on
    19394, mutual TLS on 19395, ACLs per user; its data in a tmp dir, stopped by its PID."""
    from devtools import broker

    home = tmp_path_factory.mktemp("secure-broker") / "kafka"
    settings = Settings(base_dir=str(ROOT), devtools={"local_broker": {
        "port": 19393, "controller_port": 19392, "data_dir": str(home), "heap": "384m",
        "security": {"enabled": True, "sasl_ssl_port": 19394, "ssl_port": 19395}}})
    broker.start(settings)
    yield settings
    broker.stop(settings)


@pytest.fixture(scope="session")
def spark(test_settings: Settings):
    """A real local Spark session with Delta and the Kafka connector."""
    from pipeline.spark.engine.session import build_session

    session = build_session(test_settings)
    yield session
    session.stop()


@dataclass(frozen=True)
class S3Server:
    """An S3 server on 127.0.0.1 and the one bucket made on it."""

    endpoint: str            # http://127.0.0.1:<port>
    bucket: str
    #: what a process needs in its environment to reach it (moto takes any key pair; these are
    #: not secrets, and they go through the environment as real ones must)
    env: dict[str, str]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 in server mode (a thread of this process, on a free port) with a bucket: real
    HTTP, so the job's JVM (S3A) and its Python workers (pyarrow) reach it like any store.
    moto's own listing (no index): devtools/s3_emulator.py."""
    from devtools import s3_emulator

    bucket = "urbpipe-lake"
    with s3_emulator.running(index=False, buckets=(bucket,)) as emulator:
        yield S3Server(emulator.endpoint, bucket, dict(s3_emulator.CREDENTIALS))
