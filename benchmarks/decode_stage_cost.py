"""What the decode stage's trip through Python costs a batch, against routing in the JVM.

The decode stage (``pipeline.spark.engine.decode_stage``) is a ``mapInArrow``: every Kafka
record's bytes go from the JVM to a Python worker and back before the shuffle to the state
stage. This measures, on a bench run's own messages (its broker up: ``bench_pipeline.py
--keep-broker``), the same Kafka read and the same shuffle of the same bytes three ways, each a
Spark job in one warm driver, interleaved round by round:

- ``python``: the job's decode stage (``route_batch`` in ``mapInArrow``), then the shuffle;
- ``jvm``: no Python at all, the key a Spark expression on the bytes: a stand-in for a router
  written for the JVM (it routes nothing correctly), so the most such a router could save;
- ``two-scans``: the JVM branch beside a Python branch that reads only each record's first
  128 bytes (what the per-batch URBHMSNR runs and ticks need): Kafka is read twice.

Run from the repository root::

    .venv/bin/python benchmarks/decode_stage_cost.py --run 20261208-000126
    .venv/bin/python benchmarks/decode_stage_cost.py --run RUN --batch 20000 --rounds 8

Each job reads ``--batch`` records (four tasks, as the job's ``source_records_per_task`` 5,000
gives at 20,000) from a different offset each round, so no round reads what the last one did.
It prints each variant's time per round and the median of the rounds after the first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import BENCH_DIR  # noqa: E402
from pipeline.config import Settings, load_settings  # noqa: E402

HEAD_BYTES = 128
Variant = Callable[[int], int]


def source(spark: Any, settings: Settings, start: int, count: int) -> Any:
    """``count`` records of the run's topic (partition 0) from ``start``, in four tasks."""
    topic = next(iter(settings.source_topics()))
    return (spark.read.format("kafka").options(**settings.kafka.spark())
            .option("subscribe", topic)
            .option("startingOffsets", f'{{"{topic}": {{"0": {start}}}}}')
            .option("endingOffsets", f'{{"{topic}": {{"0": {start + count}}}}}')
            .option("minPartitions", 4).load()
            .select("topic", "partition", "offset", "key", "value"))


def shuffled(frame: Any, *keys: str) -> int:
    """Shuffle the rows by ``keys`` into two tasks (the state stage's), sum there: rows."""
    from pyspark.sql import functions as F

    row = frame.repartition(2, *keys).agg(F.count("*"), F.sum(F.length("value"))).first()
    return int(row[0])


def heads_only(batches: Iterator[Any]) -> Iterator[Any]:
    """The two-scans variant's Python branch: one tiny row per Arrow batch."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64())],
                                         names=["rows"])


def variants(spark: Any, settings: Settings, count: int) -> dict[str, Variant]:
    from pyspark.sql import functions as F

    from pipeline.spark.engine.decode_stage import arrow_decoder, spark_ddl
    from pipeline.spark.engine.query import record_decoder

    decode = arrow_decoder(record_decoder(settings))

    def python(start: int) -> int:
        routed = source(spark, settings, start, count).mapInArrow(decode, spark_ddl())
        return shuffled(routed, "lane", "destination", "subscription")

    def jvm(start: int) -> int:
        keyed = source(spark, settings, start, count).withColumn(
            "subscription", F.substring("value", 200, 8))
        return shuffled(keyed, "subscription")

    def two_scans(start: int) -> int:
        records = source(spark, settings, start, count)
        data = records.select(F.substring("value", 200, 8).alias("subscription"), "value")
        heads = (records.select("offset", F.substring("value", 1, HEAD_BYTES).alias("head"))
                 .mapInArrow(heads_only, "rows bigint")
                 .select(F.lit("").alias("subscription"), F.lit(b"").alias("value")))
        return shuffled(data.unionByName(heads), "subscription")

    return {"python": python, "jvm": jvm, "two-scans": two_scans}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a bench run under .bench/runs (its topic)")
    p.add_argument("--batch", type=int, default=20_000, help="records per job")
    p.add_argument("--rounds", type=int, default=6, help="rounds (the first warms up)")
    args = p.parse_args(argv)
    from pipeline.spark.engine.session import build_session

    settings = load_settings(BENCH_DIR / "runs" / args.run / "conf.yaml")
    spark = build_session(settings)
    timings: dict[str, list[float]] = {}
    try:
        jobs = variants(spark, settings, args.batch)
        for rnd in range(args.rounds):
            for name, run in jobs.items():
                started = time.perf_counter()
                rows = run(args.batch * (rnd % 3))
                ms = (time.perf_counter() - started) * 1000
                timings.setdefault(name, []).append(ms)
                print(f"round {rnd} {name:>9}: {ms:7.0f} ms ({rows} rows shuffled)", flush=True)
    finally:
        spark.stop()
    print(f"median of rounds 1-{args.rounds - 1}, {args.batch} records a job:")
    for name, ms in timings.items():
        print(f"  {name:>9}: {statistics.median(ms[1:]):7.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
