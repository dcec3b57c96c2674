"""What a Delta commit costs as a table ages: fresh, and with the ``_delta_log`` that 1, 7 and
30 days at the default trigger leave behind, with each of the two log stores the job can use
on a local lake (``stream.delta_log_store``: ``probing``, the project's, and ``hadoop``,
Delta's own).

Run from the repository root (one Spark driver per store, conf/test.yaml's settings)::

    .venv/bin/python benchmarks/delta_log_age.py                        # ages 0,1,7,30
    .venv/bin/python benchmarks/delta_log_age.py --ages 0,30 --stores probing --commits 120

Why ages stop at 30 days: a table's log keeps ``delta.logRetentionDuration`` of commits (30
days by default) and Delta's clean-up deletes what is older at each checkpoint, so from day 30
on the log holds the same ``retention / trigger`` commits: day 365 is day 30
(pipeline/spark/land/log_growth.py).

How a table is aged without writing 518,400 real commits: a real table gets ``--commits``
real appends (a checkpoint every 50, the job's interval), then its log files are renamed
``N`` versions up and versions ``0 … N-1`` are filled with hard links of one commit's files
(its JSON, Delta's CRC and Hadoop's hidden checksum of each: the four files a local commit
leaves) and of its checkpoint at every 50th version, and ``_last_checkpoint`` is moved up
with them (without Delta's checksum of the old text). Delta reads only what follows the
latest checkpoint, so the fillers' contents are never read; they are there to be listed, as
the log of a 30-day-old table is. Their
modification time is the run's, so no clean-up deletes them during the measurement.

Then ``--commits`` appends of one row are timed on the aged table (the smallest commit: the
log's share is as large as it gets), crossing a checkpoint. With Delta's own store a commit of
a 30-day log takes tens of seconds, so its appends stop after ``--budget`` seconds per age.
Prints one row per (store, age): files in the log, appends timed, their median, mean and
slowest; writes them to ``.bench/log-age-<time>.json``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shutil
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

#: The default trigger (``stream.trigger_interval``) and checkpoint interval.
TRIGGER_S = 5
CHECKPOINT_INTERVAL = 50
_VERSIONED = re.compile(r"^(\.?)(\d{20})(\..*)$")


def retained(days: float) -> int:
    """Commits a table written at every trigger holds after ``days`` (at most 30 days)."""
    return int(min(days, 30) * 86_400 / TRIGGER_S)


def age_log(log: Path, versions: int) -> int:
    """Move every versioned file of ``log`` up ``versions`` and fill the versions below with
    hard links of version 1's files and of the first checkpoint; the files in the log after."""
    if versions == 0:
        return sum(1 for _ in log.iterdir())
    names = sorted((p.name for p in log.iterdir() if _VERSIONED.match(p.name)),
                   key=lambda n: -int(_VERSIONED.match(n)[2]))  # highest first: no clashes
    for name in names:
        dot, version, rest = _VERSIONED.match(name).groups()  # type: ignore[union-attr]
        (log / name).rename(log / f"{dot}{int(version) + versions:020d}{rest}")
    commit = [(f"{d}{versions + 1:020d}{r}", d, r) for d, r in
              (("", ".json"), ("", ".crc"), (".", ".json.crc"), (".", ".crc.crc"))]
    checkpoint = [(f"{d}{versions + CHECKPOINT_INTERVAL:020d}{r}", d, r) for d, r in
                  (("", ".checkpoint.parquet"), (".", ".checkpoint.parquet.crc"))]
    sources = {source: log / source for source, _, _ in commit + checkpoint
               if (log / source).exists()}
    for version in range(versions):
        links = commit + (checkpoint if version and version % CHECKPOINT_INTERVAL == 0 else [])
        for source, dot, rest in links:
            if source in sources:
                sources[source] = _link(sources[source], log / f"{dot}{version:020d}{rest}")
    # the newest checkpoint moved up with the rest; without Delta's checksum of the old text
    # (a mismatch sends Delta to search every version for a checkpoint) or Hadoop's
    last = log / "_last_checkpoint"
    info = json.loads(last.read_text())
    info["version"] += versions
    info.pop("checksum", None)
    last.write_text(json.dumps(info, separators=(",", ":")))
    (log / "._last_checkpoint.crc").unlink(missing_ok=True)
    return sum(1 for _ in log.iterdir())


def _link(source: Path, target: Path) -> Path:
    """Hard-link ``target`` to ``source``; past the file system's links per file (ext4:
    65,000) a copy starts a new one. The file to link the next target to."""
    try:
        os.link(source, target)
        return source
    except OSError as exc:
        if exc.errno != errno.EMLINK:
            raise
        shutil.copyfile(source, target)
        return target


def _timed_appends(spark: Any, path: str, commits: int, budget_s: float) -> list[float]:
    row = spark.range(1)
    times: list[float] = []
    started = time.monotonic()
    while len(times) < commits and time.monotonic() - started < budget_s:
        t0 = time.perf_counter()
        row.write.format("delta").mode("append").save(path)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def child(store: str, ages: list[float], commits: int, budget_s: float) -> list[dict[str, Any]]:
    """One store's rows, in this process's own Spark driver."""
    from pipeline.config import load_settings
    from pipeline.spark.engine.session import build_session

    settings = load_settings(ROOT / "conf" / "test.yaml", env={})
    settings = settings.model_copy(update={"stream": settings.stream.model_copy(
        update={"delta_log_store": store})})
    spark = build_session(settings)
    jvm = spark.sparkContext._jvm
    rows = []
    with tempfile.TemporaryDirectory(prefix="log-age-") as tmp:
        for days in ages:
            path = f"{tmp}/age-{days:g}"
            spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES "
                      f"('delta.checkpointInterval' = '{CHECKPOINT_INTERVAL}')")
            for _ in range(CHECKPOINT_INTERVAL + 10):  # a checkpoint and commits after it
                spark.range(1).write.format("delta").mode("append").save(path)
            files = age_log(Path(path) / "_delta_log", retained(days))
            jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the renamed log afresh
            times = _timed_appends(spark, path, commits, budget_s)
            count = spark.read.format("delta").load(path).count()
            rows.append({"store": store, "age_days": days, "log_files": files,
                         "versions": retained(days) + CHECKPOINT_INTERVAL + 11,
                         "commits": len(times), "rows_after": count,
                         "p50_ms": statistics.median(times), "mean_ms": statistics.mean(times),
                         "max_ms": max(times)})
            print(json.dumps(rows[-1]), flush=True)
    spark.stop()
    return rows


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ages", default="0,1,7,30", help="days (0,1,7,30)")
    p.add_argument("--stores", default="probing,hadoop", help="log stores (probing,hadoop)")
    p.add_argument("--commits", type=int, default=120, help="appends timed per age (120)")
    p.add_argument("--budget", type=float, default=180.0,
                   help="seconds of appends per age at most (180)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    ages = [float(a) for a in args.ages.split(",")]
    if args.child:
        child(args.child, ages, args.commits, args.budget)
        return 0
    rows: list[dict[str, Any]] = []
    for store in args.stores.split(","):
        done = subprocess.run(
            [sys.executable, __file__, "--child", store, "--ages", args.ages,
             "--commits", str(args.commits), "--budget", str(args.budget)],
            cwd=ROOT, capture_output=True, text=True)
        got = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        rows += got
    print("| store | age (days) | files in _delta_log | appends | p50 ms | mean ms | slowest ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['store']} | {r['age_days']:g} | {r['log_files']:,} | {r['commits']} | "
              f"{r['p50_ms']:,.0f} | {r['mean_ms']:,.0f} | {r['max_ms']:,.0f} |")
    out = ROOT / ".bench" / f"log-age-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"rows saved in {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
