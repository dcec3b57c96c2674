"""What the state stage reports besides table rows (the per-call metrics row), and how the
decode stage's one-row-per-(record, key) hand-over reaches each key's elements."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.ops.metrics import latency_breakdown, latency_breakdown_us, percentile
from pipeline.reassembly import KeyState
from pipeline.reassembly.events import TransactionComplete
from pipeline.reassembly.gaps import Gap
from pipeline.spark.engine.decode_stage import ERROR_EYE, RecordDecoder
from pipeline.spark.engine.state_stage import STATS_TABLE, batch_output, key_stats, split_rows
from pipeline.spark.land.report import latency_times, pack_times, unpack_times
from pipeline.urb import encode_message, make_element


def _frame(values: list[bytes], parts: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"value": values, "part": parts})


def test_stats_count_each_record_once_and_the_keys_open_gaps() -> None:
    frames = [_frame([b"x" * 10, b"y" * 7], [0, 1]), _frame([b"z" * 5], [0]), _frame([], [])]
    state = KeyState(gaps=[Gap(epoch=1, from_u=5, to_u=6, missing=[5, 6], reason="lost",
                               opened_ms=0)])
    stats = key_stats(("OUT1", "COLOR"), frames, state)
    # the y record's part 1 is the same Kafka record as another key's part 0: not counted here
    assert stats == {"destination": "OUT1", "subscription": "COLOR", "bytes": 15,
                     "open_gaps": 1, "landed": 0, "times": "", "file_commits_us": {},
                     "gap_states": {"open": 1}, "oldest_gap_ms": 0,
                     "outstanding": {"TRAN": 0, "INST": 0}, "storm": 0, "idle": 0,
                     "newest": []}
    assert key_stats(("OUT1", "COLOR"), [], None)["open_gaps"] == 0


def test_the_stats_row_travels_with_the_tables_and_names_no_table() -> None:
    out = batch_output([], [], 0, {"destination": "OUT1", "subscription": "C", "bytes": 3,
                                   "open_gaps": 0})
    (row,) = out[out["table"] == STATS_TABLE].to_dict("records")
    assert json.loads(row["json"])["bytes"] == 3 and row["blob"] is None
    assert STATS_TABLE not in batch_output([], [], 0)["table"].tolist()


def test_landed_transactions_carry_their_times_for_the_latency_legs() -> None:
    tod = 0xBB57F5D2AEE40D22  # 2004-06-09 15:22:52.385856 UTC (seed 000's COLOR transaction)
    one_s = 1_000_000 << 12
    tx = TransactionComplete(
        subscription="C", destination="OUT1", epoch=1, tsnr=1, dbid=1, record_count=0,
        commit_time=tod, processed_time=tod + one_s, sent_time=tod + 3 * one_s,
        initial_state=False, resent=False, possibly_resent=False, origin="live", token="",
        topic="t", first_partition=0, first_offset=0, last_partition=0, last_offset=0,
        records=(), images=(), acode=0, wcode=0, arc=0, at_ms=0)
    stats = key_stats(("OUT1", "C"), [], None, [tx, object()])
    assert stats["landed"] == 1 and unpack_times(stats["times"]).shape == (1, 3)
    landed_ms = (int(unpack_times(stats["times"])[0, 0]) // 1000) + 10_000  # 10 s after
    row = json.loads(batch_output([], [], landed_ms, stats)["json"].iloc[-1])
    legs = latency_breakdown_us(latency_times([row]))
    assert legs["commit_to_processed"]["p50"] == 1.0
    assert legs["processed_to_sent"]["p50"] == 2.0
    # landed is the batch time in whole ms: up to 1 ms below the 10 s
    assert legs["commit_to_landed"]["p50"] == pytest.approx(10.0, abs=1e-3)
    assert legs["sent_to_landed"]["p50"] == pytest.approx(7.0, abs=1e-3)
    # the same legs as from transactions rows (datetimes, aware or naive)
    moments = [pd.Timestamp(us, unit="us", tz="UTC").to_pydatetime()
               for us in latency_times([row])[0].astype(np.int64)]
    names = ("commit_time", "processed_time", "sent_time", "landed_at")
    assert latency_breakdown([dict(zip(names, moments, strict=True))]) == legs
    assert latency_breakdown([{n: m.replace(tzinfo=None) for n, m in
                               zip(names, moments, strict=True)}]) == legs


def test_a_record_with_two_keys_becomes_two_rows_and_each_key_gets_its_elements() -> None:
    """A reply message whose statuses name two subscriptions: the decode stage routes each to
    its key; the state stage re-decodes the record and keeps only its key's elements."""
    value = encode_message(None, [
        make_element("URBS", urbsrt="TRAN", urbsst="TRSP", urbssnam="COLOR", urbsdnam="OUT1"),
        make_element("URBS", urbsrt="TRAN", urbsst="TRSP", urbssnam="EMPL", urbsdnam="OUT2"),
        make_element("URBS", urbsrt="TRAN", urbsst="TRSP", urbssnam="COLOR", urbsdnam="OUT1"),
    ], ebcdic=False, big_endian=False)
    decoder = RecordDecoder({"t.replies": "REPLY"}, "REPLY", "cp037")
    rows = decoder.rows("t.replies", 0, 7, b"", value)
    assert [(r["destination"], r["subscription"], r["part"]) for r in rows] == [
        ("OUT1", "COLOR", 0), ("OUT2", "EMPL", 1)]
    for row in rows:
        elements, rejected = split_rows(pd.DataFrame([row]), decoder)
        assert rejected == []
        assert {e.char("urbssnam") for e in elements} == {row["subscription"]}
    color, _ = split_rows(pd.DataFrame([rows[0]]), decoder)
    assert [e.elem_index for e in color] == [0, 2]  # positions in the whole message


def test_a_record_the_codec_rejects_is_quarantined_with_its_bytes() -> None:
    decoder = RecordDecoder({"t.out": "OUT1"}, "OUT1", "cp037")
    (row,) = decoder.rows("t.out", 1, 9, b"COLOR", b"not a URB message")
    # an undecodable record names no subscription: the destination key keeps it (the Kafka
    # key — none, or an MQ message id — routes nothing)
    assert (row["subscription"], row["error"] is not None) == ("", True)
    elements, (bad,) = split_rows(pd.DataFrame([row]), decoder)
    assert elements == []
    assert (bad["eye"], bad["source"], bad["raw"], bad["offset"]) == (
        ERROR_EYE, "decode", b"not a URB message", 9)


_US = st.one_of(st.none(), st.integers(1_600_000_000_000_000, 2_000_000_000_000_000))


@given(st.lists(st.tuples(_US, _US, _US), max_size=40), st.integers(0, 10**7))
def test_packed_times_give_the_legs_the_unpacked_ones_give(times, after_us) -> None:
    """The metrics row's packed times lose nothing: Unix µs are exact in float64 and a time
    not known stays not known, so the legs are those of the plain tuples."""
    landed_us = 1_900_000_000_000_000 + after_us
    unpacked = unpack_times(pack_times(times))
    assert [[None if v != v else int(v) for v in row] for row in unpacked.tolist()] == \
        [list(t) for t in times]
    row = {"times": pack_times(times), "landed_us": landed_us}
    assert latency_breakdown_us(latency_times([row, row])) == \
        latency_breakdown_us([(*t, landed_us) for t in times] * 2)
    waits = sorted((landed_us - c) / 1e6 for c, _, _ in times if c is not None) * 2
    legs = latency_breakdown_us(latency_times([row, row]))
    if waits:  # the leg as the plain numbers give it, by the metrics' own percentile
        waits.sort()
        assert legs["commit_to_landed"] == {"p50": percentile(waits, 0.5),
                                            "p99": percentile(waits, 0.99),
                                            "count": float(len(waits))}
    else:
        assert "commit_to_landed" not in legs
