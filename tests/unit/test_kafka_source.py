"""The Kafka source's options, without Spark: what ``kafka_source`` asks Spark's reader for."""

from __future__ import annotations

from typing import Any

from pipeline.config import Settings
from pipeline.spark.engine.query import kafka_source


class _Reader:
    """Stands in for ``spark.readStream``: records every option it is given."""

    def __init__(self) -> None:
        self.given: dict[str, Any] = {}

    def format(self, name: str) -> _Reader:
        self.given["format"] = name
        return self

    def option(self, key: str, value: Any) -> _Reader:
        self.given[key] = value
        return self

    def options(self, **kw: Any) -> _Reader:
        self.given.update(kw)
        return self

    def load(self) -> _Reader:
        return self

    def select(self, *columns: str) -> _Reader:
        return self


class _Spark:
    def __init__(self) -> None:
        self.readStream = _Reader()


def _source_options(stream: dict[str, Any]) -> dict[str, Any]:
    spark = _Spark()
    settings = Settings.model_validate({"topics": {"outputs": {"t.out1": "OUT1"}},
                                        "stream": stream})
    kafka_source(spark, settings)  # type: ignore[arg-type]
    return spark.readStream.given


def test_a_batch_of_the_one_partition_topic_is_read_in_tasks_of_a_bounded_size() -> None:
    # one partition per source topic (topic_check): without the split, one task decodes a
    # whole batch on one core (decision 0007)
    assert _source_options({})["maxRecordsPerPartition"] == 5_000
    given = _source_options({"source_records_per_task": 16, "max_offsets_per_trigger": 64})
    assert given["maxRecordsPerPartition"] == 16
    assert given["maxOffsetsPerTrigger"] == 64
