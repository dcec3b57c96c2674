"""Ordering is checked, never assumed: the job refuses a source topic with several
partitions (a subscription is ordered only within one partition), engine-free on the
decision; the e2e test runs the job itself."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.config import Kafka, Settings, Topics
from pipeline.ops.topic_check import (
    KafkaOutOfReach,
    TopicCheckError,
    check_source_topics,
    problem,
    source_partitions,
)


def test_every_source_topic_with_its_partitions_and_the_missing_ones() -> None:
    settings = Settings()
    counts = {"urb.out1": 1, "urb.replies": 3, "other": 5}
    assert source_partitions(settings, counts) == {
        "urb.out1": 1, "urb.replies": 3, "urb.control": None}


def test_a_pattern_takes_the_topics_it_matches_now() -> None:
    settings = Settings(topics=Topics(outputs={}, output_pattern=r"urb\.out\d",
                                      pattern_destination="OUT1"))
    counts = {"urb.out1": 1, "urb.out2": 2, "urb.outx": 9, "urb.replies": 1, "urb.control": 1}
    assert source_partitions(settings, counts) == {
        "urb.out1": 1, "urb.out2": 2, "urb.replies": 1, "urb.control": 1}


def test_one_line_names_each_topic_with_several_partitions_and_why() -> None:
    assert problem({"a": 1, "b": None}) is None
    text = problem({"urb.out1": 3, "urb.replies": 1, "urb.out2": 2})
    assert text is not None and "\n" not in text
    assert "topic urb.out1 has 3 partitions" in text and "topic urb.out2 has 2" in text
    assert "urb.replies" not in text and "one partition" in text


# -- the start-up check against a fake cluster (confluent-kafka's metadata shape) -------------

@dataclass
class FakeTopic:
    partitions: dict[int, object]
    error: object = None


@dataclass
class FakeMetadata:
    topics: dict[str, FakeTopic]


class FakeAdmin:
    """``AdminClient.list_topics``: the cluster's metadata, or the error librdkafka raises."""

    def __init__(self, topics: dict[str, int] | None = None, *,
                 deleting: tuple[str, ...] = ()) -> None:
        self.topics = topics
        self.deleting = deleting

    def list_topics(self, timeout: float) -> FakeMetadata:
        if self.topics is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
        listed = {t: FakeTopic(dict.fromkeys(range(n))) for t, n in self.topics.items()}
        listed.update({t: FakeTopic({}, error="UNKNOWN_TOPIC_OR_PART") for t in self.deleting})
        return FakeMetadata(listed)


def test_single_partition_source_topics_pass_and_a_missing_one_is_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({"urb.out1": 1, "urb.replies": 1, "urb.requests": 4, "urb.alerts": 4})
    with caplog.at_level(logging.WARNING, "urbpipe.topics"):
        counts = check_source_topics(Settings(), admin=admin)
    assert counts == {"urb.out1": 1, "urb.replies": 1, "urb.control": None}
    assert [r.getMessage() for r in caplog.records] == [
        "source topic urb.control does not exist yet: its partitions are not checked"]


def test_a_source_topic_with_three_partitions_is_refused_in_one_line() -> None:
    admin = FakeAdmin({"urb.out1": 3, "urb.replies": 1, "urb.control": 1})
    with pytest.raises(TopicCheckError) as refused:
        check_source_topics(Settings(), admin=admin)
    text = str(refused.value)
    assert text.startswith("topic urb.out1 has 3 partitions: ") and "\n" not in text
    assert "README: How replicator output reaches Kafka" in text


def test_several_bad_topics_are_named_in_the_same_line() -> None:
    settings = Settings(topics=Topics(outputs={"urb.out1": "OUT1", "urb.out2": "OUT2"}))
    admin = FakeAdmin({"urb.out1": 3, "urb.out2": 1, "urb.replies": 2, "urb.control": 1})
    with pytest.raises(TopicCheckError,
                       match=r"^topic urb\.out1 has 3 partitions, topic urb\.replies has 2 "
                             r"partitions: "):
        check_source_topics(settings, admin=admin)


def test_other_topics_may_have_any_partitions() -> None:
    admin = FakeAdmin({"urb.out1": 1, "urb.replies": 1, "urb.control": 1, "urb.requests": 8})
    assert check_source_topics(Settings(), admin=admin)["urb.out1"] == 1


def test_a_pattern_topic_with_several_partitions_is_refused() -> None:
    settings = Settings(topics=Topics(outputs={}, output_pattern=r"urb\.out\d",
                                      pattern_destination="OUT1"))
    admin = FakeAdmin({"urb.out1": 1, "urb.out7": 2, "urb.replies": 1, "urb.control": 1})
    with pytest.raises(TopicCheckError, match=r"^topic urb\.out7 has 2 partitions: "):
        check_source_topics(settings, admin=admin)


def test_a_topic_being_deleted_counts_as_missing() -> None:
    admin = FakeAdmin({"urb.replies": 1, "urb.control": 1}, deleting=("urb.out1",))
    assert check_source_topics(Settings(), admin=admin)["urb.out1"] is None


def test_kafka_out_of_reach_is_its_own_error_in_one_line() -> None:
    settings = Settings(kafka=Kafka(bootstrap_servers="127.0.0.1:1"))
    with pytest.raises(KafkaOutOfReach) as failed:
        check_source_topics(settings, timeout_s=1, admin=FakeAdmin(None))
    assert str(failed.value).startswith("cannot reach Kafka at 127.0.0.1:1 within 1 s: ")
    assert "Connection refused" in str(failed.value) and "\n" not in str(failed.value)


def test_the_real_admin_client_out_of_reach_prints_nothing_itself(
        capfd: pytest.CaptureFixture[str]) -> None:
    """librdkafka logs each failed connect to stderr unless given a logger: the job's one
    line (exit 3) would drown in them."""
    settings = Settings(kafka=Kafka(bootstrap_servers="127.0.0.1:1"))
    with pytest.raises(KafkaOutOfReach, match=r"^cannot reach Kafka at 127\.0\.0\.1:1 within 2 s"):
        check_source_topics(settings, timeout_s=2)
    assert capfd.readouterr().err == ""
