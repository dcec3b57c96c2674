"""What the local file system costs a batch: Hadoop's against the project's (decision 0020).

Run from the repository root (each file system in its own Spark driver, conf/test.yaml's
settings with ``spark.local_file_system`` set)::

    .venv/bin/python benchmarks/local_fs.py
    strace -f -qq -e trace=execve -o /tmp/forks .venv/bin/python benchmarks/local_fs.py \\
        --child hadoop            # then: grep -c readlink /tmp/forks

Each driver commits ``--commits`` files to a Delta table through the job's own committer
(``pipeline.spark.land.committer``, a copy of one data file each), then runs ``--batches``
batches of a rate stream with a checkpoint (the offset and commit logs every batch writes).
Prints, per file system, the mean copy-and-commit time and the batches' walCommit
(Spark's own timing of the offset log's write).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))


def child(file_system: str, commits: int, batches: int) -> dict[str, Any]:
    from benchmarks.delta_log_age import CopyCommits
    from pipeline.config import load_settings
    from pipeline.spark.engine.session import build_session

    settings = load_settings(ROOT / "conf" / "test.yaml", env={})
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"local_file_system": file_system})})
    spark = build_session(settings)
    with tempfile.TemporaryDirectory(prefix="local-fs-") as tmp:
        path = f"{tmp}/table"
        spark.range(1).write.format("delta").save(path)
        copies = CopyCommits(spark, path, "local-fs")
        fs = copies.fs
        times = []
        for batch in range(commits):
            name = f"copy-{batch}.parquet"
            started = time.perf_counter()
            copies.copy(name)
            copies.commit(name, batch)
            times.append((time.perf_counter() - started) * 1000)
        query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
                 .writeStream.foreachBatch(lambda frame, batch_id: None)
                 .option("checkpointLocation", f"{tmp}/checkpoint")
                 .trigger(processingTime="0 seconds").start())
        while query.lastProgress is None or query.lastProgress["batchId"] < batches:
            time.sleep(0.1)
        # every batch writes its offsets, rows or none (a rate source's trigger may hold 0)
        wal = [p["durationMs"]["walCommit"] for p in query.recentProgress
               if "walCommit" in p["durationMs"]][2:][-batches:]
        query.stop()
    spark.stop()
    return {"file_system": fs.getClass().getName(), "setting": file_system,
            "commit_ms_mean": statistics.mean(times[2:]), "wal_commit_ms_median":
            statistics.median(wal), "wal_commit_ms": wal}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=30)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--child", choices=("nio", "hadoop"), help="one file system, this process")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.commits, args.batches)), flush=True)
        return 0
    for file_system in ("hadoop", "nio"):
        done = subprocess.run([sys.executable, __file__, "--child", file_system, "--commits",
                               str(args.commits), "--batches", str(args.batches)],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{row['file_system']}: copy + commit {row['commit_ms_mean']:.0f} ms per file, "
              f"walCommit median {row['wal_commit_ms_median']:.0f} ms per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
