"""Benchmark: the decode stage's Python work on an Arrow batch, batch-wise vs record by record.

Run from the repository root (engine-free, one process, one core)::

    .venv/bin/python benchmarks/bench_routing.py
    .venv/bin/python benchmarks/bench_routing.py --messages 5000 --per-message 4 --c5-rate 0.02

What one mapInArrow call of the decode stage does with a batch of Kafka records
(``pipeline.spark.engine.decode_stage.route_batch``: every record's keys, the Arrow columns
taken per key, the batch's URBHMSNR runs and ticks), timed three ways on the same batch:

- ``batch``: ``route_batch`` as the job runs it (the compiled scan walks the whole batch in one
  call per message form, the header fields are read with numpy; statuses and what the library
  defers go record by record);
- ``record by record``: the same rows from ``RecordDecoder.rows`` and ``batch_rows`` per
  record (the compiled scan called once per message, ``scan_header`` per message);
- ``batch, no library``: ``route_batch`` with the pure-Python scan (a machine without rustc).

The stream is the simulator's (one subscription, COLOR in EBCDIC by default; ``--per-message``
transactions of one record per Kafka message, ``--c5-rate`` C5 statuses); the batch has
``--messages`` records, as Spark hands the stage 5,000 per task by default
(``stream.source_records_per_task``). Each figure is the median of ``--repeat`` runs with the
garbage collector paused, as the stage pauses it. The output checks that all three gave the
same rows as the record-by-record pure-Python scan.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from benchmarks.bench_state import stream  # noqa: E402
from pipeline.spark.engine.decode_stage import (  # noqa: E402
    RecordDecoder,
    route_batch,
    stage_rows,
)
from tests.support.harness import decoder_for  # noqa: E402

KAFKA_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())])


def one_by_one(decoder: RecordDecoder, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``route_batch``'s output made record by record: ``RecordDecoder.routes`` (the compiled
    scan called once per message) and ``batch_rows`` (``scan_header`` per message)."""
    topics, partitions, offsets, keys, values = (batch.column(n).to_pylist()
                                                 for n in KAFKA_SCHEMA.names)
    index: list[int] = []
    routes: list[Any] = []
    for i, (topic, key, value) in enumerate(zip(topics, keys, values, strict=True)):
        found = decoder.routes(topic, key, value)
        index += [i] * len(found)
        routes += found
    extra = decoder.batch_rows(list(zip(topics, partitions, offsets, values, strict=True)))
    return stage_rows(batch, index, routes, extra)


def rows_of(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [row for out in batches for row in out.to_pylist()]


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median ms of ``repeat`` runs of ``fn`` with the garbage collector paused."""
    times = []
    gc.disable()
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        gc.enable()
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=5000, help="records in the batch")
    p.add_argument("--per-message", type=int, default=4, help="transactions per message")
    p.add_argument("--c5-rate", type=float, default=0.02, help="share of C5 statuses")
    p.add_argument("--encoding", choices=("ebcdic", "ascii"), default="ebcdic")
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args()

    rep, records = stream(args.encoding, args.messages, args.per_message, 29, args.c5_rate)
    records = records[:args.messages]
    batch = pa.RecordBatch.from_pylist(
        [{n: getattr(r, n) for n in KAFKA_SCHEMA.names} for r in records], schema=KAFKA_SCHEMA)
    native = decoder_for(rep.config)
    python = decoder_for(rep.config, native_scan=False)
    if not native.native_scan:
        sys.exit("pipeline/urb/native/liburbwalk.so is not built: make setup builds it (rustc)")
    want = rows_of(one_by_one(python, batch))
    for label, got in (("batch", rows_of(route_batch(native, batch))),
                       ("record by record", rows_of(one_by_one(native, batch))),
                       ("batch, no library", rows_of(route_batch(python, batch)))):
        if got != want:
            sys.exit(f"{label}: not the rows of the record-by-record pure-Python scan")
    statuses = sum(1 for r in records if native._native is not None
                   and (w := native._native.walk(r.value)) is not None and w.statuses)
    print(f"{len(records):,} records ({statuses:,} with a status), {len(want):,} rows, "
          f"{batch.column('value').nbytes / len(records):,.0f} B per message; "
          f"median of {args.repeat} runs, ms per batch:")
    for label, fn in (("batch", lambda: route_batch(native, batch)),
                      ("record by record", lambda: one_by_one(native, batch)),
                      ("batch, no library", lambda: route_batch(python, batch))):
        ms = timed(fn, args.repeat)
        print(f"  {label:<18} {ms:8.1f} ms  {ms * 1000 / len(records):6.2f} µs per message")


if __name__ == "__main__":
    main()
