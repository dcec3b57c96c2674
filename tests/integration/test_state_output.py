"""The state stage's output frame converts to Arrow as Spark does it, also when a call has
nothing to say (a timer that fires without a transition, e.g. a gap waiting for its verdict)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.gaps import stck_to_unix_ms
from pipeline.spark.state_stage import to_output
from tests.reassembly.builders import Feed, Harness, stck, txn

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
