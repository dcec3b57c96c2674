"""The state stage's output frame converts to Arrow as Spark does it, also when a call has
nothing to say (a timer that fires without a transition, e.g. a gap waiting for its verdict)."""

from __future__ import annotations

import json

import pyarrow as pa

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.gaps import stck_to_unix_ms
from pipeline.spark.engine.state_stage import to_output
from tests.unit.reassembly.builders import Feed, Harness, stck, txn

COLUMNS = (("table", pa.string()), ("json", pa.string()), ("blob", pa.binary()))


def arrow_columns(frame) -> list:
    """pyspark.sql.conversion's per-column conversion of a pandas UDF's output."""
    out = []
    for name, kind in COLUMNS:
        series = frame[name]
        mask = None if hasattr(series.array, "__arrow_array__") else series.isnull()
        out.append(pa.Array.from_pandas(series, mask=mask, type=kind))
    return out


def test_an_empty_output_is_arrow_arrays_not_chunked_ones() -> None:
    arrays = arrow_columns(to_output({}))
    assert all(isinstance(a, pa.Array) and len(a) == 0 for a in arrays)
    pa.RecordBatch.from_arrays(arrays, [n for n, _ in COLUMNS])  # what failed in Spark


def test_a_timer_waiting_for_a_gap_verdict_yields_no_events() -> None:
    """Why empty outputs happen: the retry deadline after the last round sends nothing."""
    config = ReassemblyConfig(retry_initial_ms=1_000, max_retries=0, verdict_wait_ms=60_000)
    lagging = (stck_to_unix_ms(stck(0)) or 0) + 100_000  # processed long after it was sent
    h, feed = Harness(config, now_ms=lagging), Feed()
    h.feed(feed.send(txn(1)) + feed.send(txn(3)))
    assert h.fire() == [] and h.timeout is not None


def test_rows_are_json_the_sinks_schemas_parse() -> None:
    """The hand-over's JSON (orjson since the throughput work) keeps what ``json.dumps`` gave:
    ISO 8601 times with their offset (``pipeline.spark.land.tables.TS_FORMAT``), nested alert
    details as a JSON string, tuples as arrays, None as null, big unsigned ints exact, unknown
    types as text."""
    from datetime import UTC, datetime
    from decimal import Decimal

    moment = datetime(2026, 11, 22, 7, 38, 52, 106000, tzinfo=UTC)
    frame = to_output({
        "transactions": [{"tsnr": 2**64 - 1, "commit_time": moment, "token": None,
                          "isns": (1, 2), "odd": Decimal("1.50")}],
        "alerts": [{"kind": "gap_open", "details": {"b": 1, "a": [moment.isoformat()]}}],
        "images": [{"tsnr": 1, "payload": b"\x01\x02"}],
    })
    rows = [json.loads(j) for j in frame["json"]]
    assert rows[0] == {"tsnr": 2**64 - 1, "commit_time": "2026-11-22T07:38:52.106000+00:00",
                       "token": None, "isns": [1, 2], "odd": "1.50"}
    assert rows[1]["details"] == '{"a": ["2026-11-22T07:38:52.106000+00:00"], "b": 1}'
    assert rows[2] == {"tsnr": 1} and frame["blob"].tolist() == [None, None, b"\x01\x02"]
    assert all(isinstance(j, str) for j in frame["json"])
