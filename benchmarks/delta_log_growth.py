"""Does a Delta commit get slower as the table's ``_delta_log`` fills up?

Run from the repository root (one Spark session, local[2], conf/test.yaml's settings)::

    .venv/bin/python benchmarks/delta_log_growth.py                   # 2,000 commits
    .venv/bin/python benchmarks/delta_log_growth.py --commits 500 --report-every 50

Why: in the lake soak (BENCHMARKS.md "Lake soak") a batch's Delta commits grow over the
batches, with or without compaction, and the one thing that grows in both phases is each
``_delta_log``: every commit leaves its JSON and CRC there (and, on the local
file system, Hadoop's hidden ``.crc`` of each) for ``delta.logRetentionDuration`` (30 days by
default). Delta lists that folder to find the newest version; on the local file system and
HDFS a listing reads the whole folder, on S3 it starts at a key.

What it does: one table, ``--commits`` appends of one row (the smallest commit, so the log's
share is as large as it gets), each timed; beside each append a checkpoint-style write of a
small file through the same JVM's Hadoop file system (create + rename, as the stream's offset
log writes: a control that shares the JVM and the disk but not the log). Every
``--report-every`` commits it prints the medians, the files in ``_delta_log``, the time of
one listing of it, and the JVM's GC time and heap: if the appends slow down while the control
does not, the log (not the JVM, not the machine) is what costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from pipeline.config import load_settings  # noqa: E402
from pipeline.spark.engine.session import build_session  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=2000, help="appends to time (2000)")
    p.add_argument("--report-every", type=int, default=100, help="print a line every N (100)")
    p.add_argument("--checkpoint-interval", type=int, default=50,
                   help="delta.checkpointInterval of the table (50, the job's default)")
    p.add_argument("--conf-file", default=str(ROOT / "conf" / "test.yaml"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    spark = build_session(load_settings(Path(args.conf_file), env={}))
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop = jvm.org.apache.hadoop.fs
    fs = hadoop.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    gcs = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    runtime = jvm.java.lang.Runtime.getRuntime()

    def gc_ms() -> int:
        return sum(g.getCollectionTime() for g in gcs)

    with tempfile.TemporaryDirectory(prefix="delta-log-growth-") as tmp:
        base = Path(tmp)
        table, log = str(base / "t"), base / "t" / "_delta_log"
        row = spark.range(1).selectExpr("id", "'x' AS s")
        (row.write.format("delta")
         .option("delta.checkpointInterval", str(args.checkpoint_interval)).save(table))
        appends: list[float] = []
        writes: list[float] = []
        gc0 = gc_ms()
        print(f"{'commits':>7} {'append p50 ms':>13} {'control p50 ms':>14} "
              f"{'log files':>9} {'listing ms':>10} {'GC ms':>6} {'heap MB':>7}", flush=True)
        for i in range(1, args.commits + 1):
            t = time.perf_counter()
            row.write.format("delta").mode("append").save(table)
            appends.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            tmp_file = hadoop.Path(str(base / f"w{i % 100}.tmp"))
            out = fs.create(tmp_file, True)
            out.write(bytearray(b"x" * 200))
            out.close()
            fs.rename(tmp_file, hadoop.Path(str(base / f"w{i % 100}")))
            writes.append((time.perf_counter() - t) * 1000)
            if i % args.report_every:
                continue
            files = sum(1 for _ in log.iterdir())
            t = time.perf_counter()
            fs.listStatus(hadoop.Path(str(log)))
            listing = (time.perf_counter() - t) * 1000
            heap = (runtime.totalMemory() - runtime.freeMemory()) >> 20
            print(f"{i:>7} {statistics.median(appends):>13.1f} "
                  f"{statistics.median(writes):>14.2f} {files:>9} {listing:>10.1f} "
                  f"{gc_ms() - gc0:>6} {heap:>7}", flush=True)
            appends, writes, gc0 = [], [], gc_ms()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
