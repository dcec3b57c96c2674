"""Ordering is checked, never assumed: the job refuses a source topic with several
partitions (issue 14.1), engine-free on the decision; the e2e test runs the job itself."""

from __future__ import annotations

from pipeline.config import Settings, Topics
from pipeline.ops.topic_check import problem, source_partitions


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
