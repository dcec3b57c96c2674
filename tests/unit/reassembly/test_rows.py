"""ElementRow construction and ordering; ReassemblyConfig validation."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.rows import ElementRow, messages


def row(offset: int, idx: int, partition: int = 0, topic: str = "t",
        **fields: object) -> ElementRow:
    return ElementRow(topic, partition, offset, idx, 1, 0, "URBR", fields)


def test_from_mapping_tolerates_pandas_values() -> None:
    r = ElementRow.from_mapping({
        "topic": "t", "partition": 1.0, "offset": 7, "elem_index": 2, "urbhmsnr": 3,
        "urbhtime": float("nan"), "eye": "URBT ", "fields": json.dumps({"urbttsnr": 5}),
        "payload": bytearray(b"ab"), "data": math.nan,
    })
    assert (r.partition, r.offset, r.elem_index, r.urbhtime, r.eye) == (1, 7, 2, 0, "URBT")
    assert r.num("urbttsnr") == 5 and r.payload == b"ab" and r.data is None


def test_field_accessors() -> None:
    r = ElementRow("t", 0, 0, 0, 0, 0, "URBT", {
        "urbtrsnd": "y", "urbtinst": " ", "urbtarc": b"\x09", "urbtsnam": "COLOR  ",
        "urbtrcnt": math.nan})
    assert r.flag("urbtrsnd") and not r.flag("urbtinst") and not r.flag("urbtptrn")
    assert r.num("urbtarc") == 9 and r.num("urbtrcnt") == 0 and r.num("missing") == 0
    assert r.char("urbtsnam") == "COLOR" and r.char("missing") == ""


def test_messages_restore_kafka_order() -> None:
    rows = [row(5, 1), row(3, 0, partition=1), row(5, 0), row(4, 0), row(3, 1, partition=1)]
    grouped = messages(rows)
    assert [[(r.partition, r.offset, r.elem_index) for r in m] for m in grouped] == [
        [(0, 4, 0)], [(0, 5, 0), (0, 5, 1)], [(1, 3, 0), (1, 3, 1)]]


def test_messages_of_two_topics_at_same_offset_stay_apart() -> None:
    rows = [row(1, 0, topic="b"), row(1, 0, topic="a"), row(1, 1, topic="b")]
    assert [[r.topic for r in m] for m in messages(rows)] == [["a"], ["b", "b"]]


@pytest.mark.parametrize("bad", [
    {"landing_policy": "later"}, {"max_requests_per_gap": 0}, {"max_retries": -1},
    {"retry_multiplier": 0.5}, {"request_token": "TOOLONGTOKEN"}, {"partial_timeout_ms": 0},
    {"partial_stall_ms": -1}, {"stat_interval_ms": 0}, {"storm_max_gaps": 0},
])
def test_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        ReassemblyConfig(**bad)


def test_config_from_mapping_ignores_unknown_keys_and_backs_off() -> None:
    c = ReassemblyConfig.from_mapping({"landing_policy": "hold", "retry_initial_ms": 100,
                                       "stat_interval_ms": 60_000, "kafka": {"x": 1}})
    assert c.landing_policy == "hold" and c.stat_interval_ms == 60_000
    assert [c.backoff_ms(n) for n in (1, 2, 3)] == [100, 200, 400]
    assert ReassemblyConfig(retry_max_ms=150, retry_initial_ms=100).backoff_ms(5) == 150
