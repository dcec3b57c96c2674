"""The job's producer connects at start: an unreachable broker is one clear error, at once."""

from __future__ import annotations

import time

import pytest

from pipeline.config import Settings
from pipeline.spark.land.kafka_out import KafkaOut, KafkaUnreachable


def test_an_unreachable_broker_is_one_clear_error(test_settings: Settings) -> None:
    kafka = test_settings.kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})
    out = KafkaOut(test_settings.model_copy(update={"kafka": kafka}))
    started = time.monotonic()
    with pytest.raises(KafkaUnreachable, match=r"cannot reach Kafka at 127\.0\.0\.1:1 within 2 s"):
        out.connect(timeout_s=2)
    assert time.monotonic() - started < 10
