"""Local broker helpers that need no broker: cluster ids, and topic creation against a fake
admin client (the real broker's part is tests/e2e/test_topic_partitions.py)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from devtools import broker
from devtools.broker import BrokerError, new_cluster_id
from pipeline.config import Settings
from tests.unit.ops.test_topic_check import FakeMetadata, FakeTopic


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(3000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)


# -- topic creation ----------------------------------------------------------------------------

def _done(exc: Exception | None = None) -> Future:
    fut: Future = Future()
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
    return fut


@dataclass
class FakeCluster:
    """An AdminClient over topic → partitions. ``lingering``: how many create attempts
    after a delete still find the old topic (KRaft settles a deletion asynchronously)."""

    topics: dict[str, int]
    lingering: int = 0
    deleted: list[str] = field(default_factory=list)
    _ghosts: dict[str, int] = field(default_factory=dict)

    def list_topics(self, timeout: float) -> FakeMetadata:
        shown = {**self.topics, **self._ghosts}
        return FakeMetadata({t: FakeTopic(dict.fromkeys(range(n))) for t, n in shown.items()})

    def delete_topics(self, topics: list[str], operation_timeout: float) -> dict[str, Future]:
        self.deleted.extend(topics)
        for t in topics:
            if self.lingering:
                self._ghosts[t] = self.topics[t]
            del self.topics[t]
        return {t: _done() for t in topics}

    def create_topics(self, new: list[Any]) -> dict[str, Future]:
        out = {}
        for n in new:
            if n.topic in self.topics or n.topic in self._ghosts:
                out[n.topic] = _done(KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)))
            else:
                self.topics[n.topic] = n.num_partitions
                out[n.topic] = _done()
        if self._ghosts:
            self.lingering -= 1
            if self.lingering <= 0:
                self._ghosts.clear()
        return out


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster({})
    monkeypatch.setattr(broker, "_admin", lambda _settings: fake)
    return fake


SETTINGS = Settings(devtools={"local_broker": {"partitions": 4}})


def test_source_topics_get_one_partition_the_others_local_broker_partitions(
        cluster: FakeCluster) -> None:
    created = broker.create_topics(SETTINGS)
    assert sorted(created) == sorted(SETTINGS.topics.all_created())
    assert cluster.topics == {"urb.out1": 1, "urb.replies": 1, "urb.control": 1,
                              "urb.requests": 4, "urb.alerts": 4}


def test_start_remakes_the_source_topics_an_older_version_made_with_several(
        cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.topics.update({"urb.out1": 2, "urb.replies": 2, "urb.requests": 2})
    created = broker.create_topics(SETTINGS, fix_partitions=True)
    assert cluster.deleted == ["urb.out1", "urb.replies"]  # never requests: the job reads none
    assert cluster.topics == {"urb.out1": 1, "urb.replies": 1, "urb.control": 1,
                              "urb.requests": 2, "urb.alerts": 4}
    assert set(created) == {"urb.out1", "urb.replies", "urb.control", "urb.alerts"}
    assert capsys.readouterr().err.strip().splitlines() == [
        "recreating urb.out1, urb.replies with one partition (an older version made them "
        "with more)"]


def test_a_deletion_that_settles_late_is_waited_for(cluster: FakeCluster) -> None:
    cluster.topics.update({"urb.out1": 3})
    cluster.lingering = 2
    broker.create_topics(SETTINGS, fix_partitions=True)
    assert cluster.topics["urb.out1"] == 1


def test_a_deletion_that_never_settles_says_what_to_run(cluster: FakeCluster) -> None:
    cluster.topics.update({"urb.out1": 3})
    cluster.lingering = 10**6
    cluster.delete_topics(["urb.out1"], 30)
    with pytest.raises(BrokerError, match=r"^could not make urb\.out1 again with one partition "
                                          r"within 0\.6 s; .*devtools\.broker start"):
        broker._create(SETTINGS, cluster, ["urb.out1"], remade={"urb.out1"}, timeout_s=0.6)


def test_topics_on_another_cluster_deletes_nothing_and_warns_in_one_line(
        cluster: FakeCluster) -> None:
    cluster.topics.update({"urb.out1": 3, "urb.replies": 1})
    line = broker.ensure_topics(SETTINGS)
    assert cluster.deleted == [] and cluster.topics["urb.out1"] == 3
    created, warning = line.splitlines()
    assert created == "topics created: urb.requests, urb.alerts, urb.control"
    assert warning.startswith("warning: topic urb.out1 has 3 partitions: ")
