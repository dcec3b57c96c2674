"""Shared fixtures: test settings, the real local broker and a real Spark + Delta session.

Tests under tests/spark are marked ``spark`` and tests under tests/e2e ``e2e`` automatically;
everything else is engine-free (``unit``). The broker fixture starts the project's own KRaft
broker from conf/test.yaml (port 19092) if it is not running and stops it at the end if it
started it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
TEST_CONF = ROOT / "conf" / "test.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT).parts
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        elif "spark" in parts:
            item.add_marker(pytest.mark.spark)
        elif not any(item.iter_markers(name) for name in ("spark", "e2e")):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def test_settings() -> Settings:
    return load_settings(TEST_CONF, env={})


@pytest.fixture(scope="session")
def kafka_bootstrap(test_settings: Settings) -> Iterator[str]:
    """Bootstrap address of the real local broker (started here if needed)."""
    from pipeline.ops import broker

    was_running = broker.status(test_settings).startswith("broker running")
    broker.start(test_settings)
    yield test_settings.kafka.bootstrap_servers
    if not was_running:
        broker.stop(test_settings)


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
def spark(test_settings: Settings):
    """A real local Spark session with Delta and the Kafka connector."""
    from pipeline.spark.session import build_session

    session = build_session(test_settings)
    yield session
    session.stop()
