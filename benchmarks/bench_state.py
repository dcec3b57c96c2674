"""Benchmark: the state task's Python work for one busy key, slow path alone vs fast path.

Run from the repository root (engine-free, one process, one core)::

    .venv/bin/python benchmarks/bench_state.py                     # batches of 2,000 and 20,000
    .venv/bin/python benchmarks/bench_state.py --sizes 2000 --encoding ascii

What one state call does for a key with the direct writer (pipeline/spark/engine/
state_stage.py), split into phases and timed one by one:

- ``state``: the key's state from and to bytes (Spark keeps it as one binary value);
- ``decode`` + ``assembly`` (slow): ``split_frames`` (full decode into ``ElementRow``s),
  then ``step``; (fast) ``key_step``: the fast path over the leading easy messages
  (``pipeline.reassembly.fast``, of which ``columnar.decode`` is reported on its own), the
  rest through ``split_records`` + ``step``;
- ``rows``: ``events_to_tables``, the landed transactions' columns for Arrow;
- ``parquet``: ``DataFiles.split``, the transactions/records/images Parquet files (to a
  temporary folder).

The stream is the simulator's (one subscription, COLOR in EBCDIC or EMPLOYEE in ASCII, 32 KB
messages), decoded by the decode stage as the harness does (tests/support/harness.py);
its first batch (the STRT and a few messages: the key's first call) is a warm-up and not
counted. The output checks that
both paths landed the same rows. Peak RSS is the whole process's (stream and both runs).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.results import write_results  # noqa: E402
from devtools.sim import Replicator  # noqa: E402
from pipeline.reassembly import KeyState, columnar, step  # noqa: E402
from pipeline.reassembly.tables import events_to_tables  # noqa: E402
from pipeline.spark.engine.gcpause import gc_paused  # noqa: E402
from pipeline.spark.engine.state_stage import key_step, split_frames  # noqa: E402
from pipeline.spark.land.datafiles import DataFiles  # noqa: E402
from pipeline.spark.land.tables import DIRECT_TABLES  # noqa: E402
from tests.support.harness import (  # noqa: E402
    KafkaLog,
    decoder_for,
    default_reassembly,
    group_frames,
    message_rows,
)
from tests.support.scenarios import sim_config  # noqa: E402

SUBSCRIPTION = {"ebcdic": "COLOR", "ascii": "EMPLOYEE"}
WARM_UP = 10  # records of the first, uncounted batch (the STRT: the key's first call)


def stream(encoding: str, messages: int, per_message: int, seed: int, c5_rate: float = 0.0
           ) -> tuple[Any, list[Any]]:
    """The simulator's records for one subscription: at least ``messages`` Kafka records of
    ``per_message`` transactions each (the replicator sends its open message then, as it
    does when the load is not flat out: bench_pipeline.py's messages hold ~3); ``c5_rate``:
    the share of C5 user-data statuses (a real stream's, ~2 %, cuts the plain runs short)."""
    config = sim_config(encoding, [SUBSCRIPTION[encoding]], max_message_size=32768,
                        c5_rate=c5_rate)
    rep = Replicator(config, seed=seed)
    kafka = KafkaLog(1)
    out = rep.start()
    while len(out) < messages:
        for _ in range(per_message):
            out += rep.step()
        out += rep.flush()
    for d in out:
        kafka.append(d)
    return rep, kafka.records


def run(records: list[Any], size: int, rep: Any, fast: bool, folder: str
        ) -> dict[str, Any]:
    """Every batch of ``size`` records through one key's state call; phase times summed
    over the batches after the first."""
    config = default_reassembly(tod_offset_us=rep.config.tod_offset_us)
    decoder = decoder_for(rep.config)
    files = DataFiles(paths={t: f"{folder}/{'fast' if fast else 'slow'}{size}/{t}"
                             for t in DIRECT_TABLES}, stats_columns=32,
                      mirror_subscriptions=frozenset(), mirror_statuses=frozenset())
    for path in files.paths.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = defaultdict(float)
    counts = {"messages": 0, "transactions": 0, "records": 0, "images": 0, "fast_tx": 0}
    blob: bytes | None = None
    landed_rows: list[Any] = []
    now = 1_750_000_000_000
    cuts = [0, *range(WARM_UP, len(records), size)]
    for batch, start in enumerate(cuts):
        part = records[start:cuts[batch + 1] if batch + 1 < len(cuts) else len(records)]
        frames = group_frames(message_rows(decoder, part), batch, 0, 10_000)
        key = next(k for k in frames if k[1])
        now += 1000
        tick: dict[str, float] = {}
        with gc_paused():
            t0 = time.perf_counter()
            current = KeyState.from_bytes(blob) if blob is not None else None
            t1 = time.perf_counter()
            state_in = t1 - t0
            if fast:
                values = [bytes(v) for f in frames[key]
                          for v, p in zip(f["value"], f["part"], strict=True) if p == 0]
                tc = time.perf_counter()  # measured on its own, not part of the total
                columnar.decode(values, decoder.codepage, config.max_buffered_bytes)
                tick["of which columnar.decode"] = time.perf_counter() - tc
                t1 = time.perf_counter()
                done = key_step(current, frames[key], now, config, key, decoder)
                result, before = done.result, done.landed
                t2 = t3 = time.perf_counter()
                tick["fast path + machine (decode, assembly)"] = t2 - t1
                counts["fast_tx"] += len(before["transactions"]["tsnr"]) if before else 0
            else:
                elements, _rejected = split_frames(frames[key], decoder)
                t2 = time.perf_counter()
                result = step(current, elements, now, config, key)
                t3 = time.perf_counter()
                tick["decode (split_frames)"] = t2 - t1
                tick["assembly (step)"] = t3 - t2
                before = None
            tables, columns = events_to_tables(result.events, now, config.tod_offset_us,
                                               before)
            t4 = time.perf_counter()
            files.split(tables, columns, batch)
            t5 = time.perf_counter()
            blob = result.state.to_bytes() if result.state is not None else None
            t6 = time.perf_counter()
        tick["rows (events_to_tables)"] = t4 - t3
        tick["parquet (DataFiles.split)"] = t5 - t4
        tick["state (from/to bytes)"] = state_in + (t6 - t5)
        landed_rows.append(columns)
        if batch == 0:
            continue  # the warm-up: the key's first batch (STRT)
        for name, seconds in tick.items():
            times[name] += seconds
        counts["messages"] += len(part)
        counts["transactions"] += len(columns["transactions"]["tsnr"])
        counts["records"] += len(columns["records"]["tsnr"])
        counts["images"] += len(columns["images"]["tsnr"])
    return {"times": dict(times), "counts": counts, "columns": landed_rows}


def _rows(batches: list[Any]) -> list[dict[str, list[tuple]]]:
    """Each batch's landed rows per table, in one order: the fast path's transactions come
    ahead of the machine's, so the order within a batch differs (a Delta table has none)."""
    return [{table: sorted(zip(*cols.values(), strict=True), key=repr)
             for table, cols in columns.items()} for columns in batches]


def report(label: str, out: dict[str, Any]) -> float:
    times, counts = out["times"], out["counts"]
    total = sum(v for k, v in times.items() if not k.startswith("of which"))
    msgs, txs = counts["messages"], counts["transactions"]
    print(f"  {label}: {msgs} messages, {txs} transactions ({counts['records']} records, "
          f"{counts['images']} images) in {total:.2f} s: {total / msgs * 1000:.3f} ms/message, "
          f"{txs / total:,.0f} tx/s" + (f"; fast path landed {counts['fast_tx']}"
                                          if label == "fast" else ""))
    for name, seconds in times.items():
        print(f"      {name:<40} {seconds:7.3f} s  {seconds / msgs * 1000:.4f} ms/message")
    return total


def result_row(size: int, label: str, out: dict[str, Any], total: float,
               same: bool) -> dict[str, Any]:
    """One printed line of ``report`` as a JSON row (``benchmarks.results``)."""
    msgs, txs = out["counts"]["messages"], out["counts"]["transactions"]
    return {"batch": size, "path": label, "messages": msgs, "transactions": txs,
            "seconds": round(total, 3), "ms_per_message": round(total / msgs * 1000, 4),
            "tx_per_s": round(txs / total), "same_rows": same,
            "phases_ms_per_message": {name: round(sec / msgs * 1000, 4)
                                      for name, sec in out["times"].items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000],
                   help="messages per batch")
    p.add_argument("--batches", type=int, default=1, help="measured batches per size")
    p.add_argument("--encoding", choices=sorted(SUBSCRIPTION), default="ebcdic")
    p.add_argument("--per-message", type=int, default=3, help="transactions per message")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--c5-rate", type=float, default=0.0,
                   help="share of C5 user-data statuses in the stream (e.g. 0.02)")
    args = p.parse_args()
    t = time.perf_counter()
    rep, records = stream(args.encoding, WARM_UP + max(args.sizes) * args.batches,
                          args.per_message, args.seed, args.c5_rate)
    print(f"stream: {len(records)} messages of {SUBSCRIPTION[args.encoding]} "
          f"({args.encoding}, C5 rate {args.c5_rate}), "
          f"{sum(len(r.value) for r in records) / 1e6:.1f} MB, made in "
          f"{time.perf_counter() - t:.1f} s")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            part = records[:WARM_UP + size * args.batches]
            print(f"batch size {size} ({args.batches} measured batch(es) after a warm-up):")
            slow = run(part, size, rep, False, folder)
            fast = run(part, size, rep, True, folder)
            same = _rows(slow["columns"]) == _rows(fast["columns"])
            a, b = report("slow", slow), report("fast", fast)
            print(f"  speed-up {a / b:.1f}x; same rows: {same}")
            rows += [result_row(size, "slow", slow, a, same),
                     result_row(size, "fast", fast, b, same)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MB")
    write_results("state", rows)


if __name__ == "__main__":
    main()
