"""State lanes planned without Spark (pipeline.spark.engine.lanes): round-robin placement of the
configured keys, stable JSON, and the decode stage tagging each row with its key's lane."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.spark.engine.decode_stage import RecordDecoder
from pipeline.spark.engine.lanes import LaneError, from_json, plan_lanes, to_json


def fake_partition(n: int):
    """A stand-in for Spark's hash: deterministic and spread, like Murmur3 pmod n."""
    return lambda lane, key: zlib.crc32(f"{lane}|{key[0]}|{key[1]}".encode()) % n


@given(st.lists(st.tuples(st.sampled_from(["OUT1", "OUT2"]), st.text("ABCXYZ", min_size=1,
                                                                       max_size=8)),
                unique=True, min_size=1, max_size=12),
       st.integers(1, 8))
def test_configured_keys_go_round_robin_over_the_partitions(keys, n) -> None:
    where = fake_partition(n)
    lanes = plan_lanes(keys, n, where)
    assert [where(lanes[k], k) for k in keys] == [i % n for i in range(len(keys))]
    assert all(lane >= 0 for lane in lanes.values())


def test_the_smallest_lane_is_taken_so_the_plan_is_reproducible() -> None:
    where = fake_partition(2)
    keys = [("OUT1", "COLOR"), ("OUT1", "EMPLOYEE")]
    first = plan_lanes(keys, 2, where)
    assert first == plan_lanes(keys, 2, where)
    for key, lane in first.items():
        assert all(where(c, key) != where(lane, key) for c in range(lane))


def test_a_partitioner_that_never_reaches_a_partition_is_an_error() -> None:
    with pytest.raises(LaneError, match="partition 1"):
        plan_lanes([("OUT1", "A"), ("OUT1", "B")], 2, lambda lane, key: 0)


def test_json_round_trip() -> None:
    lanes = {("OUT1", "COLOR"): 3, ("OUT1", "EMPLOYEE"): 0, ("REPLY", ""): 7}
    assert from_json(to_json(lanes, 4)) == lanes


def test_decode_rows_carry_the_lane_of_their_key_and_0_for_others() -> None:
    from pipeline.urb.encode import encode_message, make_element

    decoder = RecordDecoder({"t": "OUT1"}, "OUT1", "cp037", lanes={("OUT1", "SUB1"): 5})
    value = encode_message(None, [make_element("URBT", urbtsnam="SUB1", urbttsnr=1)],
                           ebcdic=False, big_endian=False)
    mine = decoder.rows("t", 0, 0, b"SUB1", value)
    assert [r["lane"] for r in mine] == [5] and mine[0]["subscription"] == "SUB1"
    other = RecordDecoder({"t": "OUT1"}, "OUT1", "cp037").rows("t", 0, 0, b"SUB1", value)
    assert [r["lane"] for r in other] == [0]
    bad = decoder.rows("t", 0, 1, b"SUB1", b"garbage")  # the destination key, whatever the key
    assert bad[0]["lane"] == 0 and bad[0]["error"] and bad[0]["subscription"] == ""
