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
With the project's store the job's own commit of a batch's files follows, as many times, with
its parts timed: the log store's listing, the snapshot update, the whole commit
(``_timed_parts``). The streaming checkpoint's WAL is not aged here: Spark keeps its last 100
batches' offsets, commits and state versions whatever the job's age (the lake soak measures
it, BENCHMARKS.md "The query's checkpoint").
Prints one row per (store, age): files in the log, appends timed, their median, mean and
slowest, the parts' medians; writes them to ``.bench/log-age-<time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
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
#: the S3 emulator's bucket for the tables on S3
S3_BUCKET = "log-age"


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


def _timed_appends(spark: Any, path: str, commits: int, budget_s: float,
                   emulator: Any = None) -> tuple[list[float], list[int]]:
    """The appends' times (ms) and, on the S3 emulator, each one's LIST requests."""
    row = spark.range(1)
    times: list[float] = []
    lists: list[int] = []
    started = time.monotonic()
    while len(times) < commits and time.monotonic() - started < budget_s:
        before = emulator.snapshot()["LIST"] if emulator else 0
        t0 = time.perf_counter()
        row.write.format("delta").mode("append").save(path)
        times.append((time.perf_counter() - t0) * 1000)
        if emulator:
            lists.append(emulator.snapshot()["LIST"] - before)
    return times, lists


class CopyCommits:
    """A batch's commit as the job makes it, on any Delta table: a copy of one of the table's
    data files (:meth:`copy`), then the job's own commit of it (:meth:`commit`:
    ``pipeline.spark.land.committer``, one ``AddFile`` and the batch's ``SetTransaction``,
    after the commit ledger's look at the log). The table still reads whole after."""

    def __init__(self, spark: Any, path: str, app_id: str) -> None:
        from pipeline.spark.land.committer import DeltaCommitter
        from pipeline.spark.land.ledger import CommitLedger

        self._hadoop = spark.sparkContext._jvm.org.apache.hadoop.fs
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._source = self._hadoop.Path(spark.read.format("delta").load(path).inputFiles()[0])
        self.fs = self._source.getFileSystem(self._conf)
        self._size = self.fs.getFileStatus(self._source).getLen()
        self._path, self._app_id = path, app_id
        self._committer, self._ledger = DeltaCommitter(spark), CommitLedger(spark, app_id)

    def copy(self, name: str) -> None:
        self._hadoop.FileUtil.copy(self.fs, self._source, self.fs,
                                   self._hadoop.Path(f"{self._path}/{name}"), False, self._conf)

    def commit(self, name: str, batch: int) -> None:
        self._committer.commit(self._path, [{"path": name, "size": self._size,
                                             "stats": '{"numRecords":1}',
                                             "modification_time": int(time.time() * 1000)}],
                               self._app_id, batch, self._ledger)


def _timed_parts(spark: Any, path: str, commits: int) -> dict[str, list[float]]:
    """The job's own commit of a batch's files (:class:`CopyCommits`), timed ``commits``
    times with its parts beside it (ms): ``list``, the log store's listing from the newest
    checkpoint on (what a snapshot update reads of the log); ``snapshot``, a transaction's
    start (Delta brings the table's snapshot up to date: the listing and the commits after the
    checkpoint); ``commit``, the whole ``DeltaCommitter.commit`` (which starts its own
    transaction, then writes the version, its checksum and, every 50th, a checkpoint)."""
    jvm = spark.sparkContext._jvm
    hadoop = jvm.org.apache.hadoop.fs
    copies = CopyCommits(spark, path, f"log-age-{time.time_ns()}")
    parts: dict[str, list[float]] = {"list": [], "snapshot": [], "commit": []}
    for batch in range(commits):
        name = f"part-log-age-{batch:05d}.parquet"
        copies.copy(name)
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession,
                                                                    path)
        version = delta_log.unsafeVolatileSnapshot().version()
        # as Delta asks (FileNames.listingPrefix): its qualified log path, whose scheme
        # chooses the store, and the version's name up to its dot
        start = hadoop.Path(delta_log.logPath(),
                            f"{version - version % CHECKPOINT_INTERVAL:020d}.")
        t0 = time.perf_counter()
        listed = delta_log.store().listFrom(start, delta_log.newDeltaHadoopConf()).size()
        t1 = time.perf_counter()
        if listed > 4 * (CHECKPOINT_INTERVAL + 1) + 1:  # four files per version at most
            raise RuntimeError(f"the listing from {start} gave {listed} files: not the log "
                               "from the checkpoint on (is the start Delta's listing prefix?)")
        delta_log.startTransaction()
        t2 = time.perf_counter()
        copies.commit(name, batch)
        t3 = time.perf_counter()
        for part, ms in (("list", t1 - t0), ("snapshot", t2 - t1), ("commit", t3 - t2)):
            parts[part].append(ms * 1000)
    return parts


def age_s3_log(emulator: Any, bucket: str, log: str, versions: int) -> int:
    """``age_log`` on an S3 bucket of the emulator (devtools/s3_emulator.py): the same moves
    and fillers, made in moto's bucket directly (a million PUTs would take hours), two keys per
    commit (S3A writes no Hadoop checksums); the keys under ``log`` after."""
    from devtools.s3_emulator import names_under, put_key, remove_key, renamed

    keys = emulator.bucket(bucket).keys
    prefix = log.rstrip("/") + "/"
    if versions == 0:
        return len(names_under(keys, prefix))
    names = [n for n in names_under(keys, prefix) if _VERSIONED.match(n[len(prefix):])]
    for name in sorted(names, key=lambda n: -int(n[len(prefix):][:20])):
        version, rest = int(name[len(prefix):][:20]), name[len(prefix) + 20:]
        put_key(keys, f"{prefix}{version + versions:020d}{rest}", remove_key(keys, name))
    sources = {rest: keys[f"{prefix}{versions + offset:020d}{rest}"]
               for offset, rest in ((1, ".json"), (1, ".crc"),
                                    (CHECKPOINT_INTERVAL, ".checkpoint.parquet"))
               if dict.__contains__(keys, f"{prefix}{versions + offset:020d}{rest}")}
    for key in sources.values():
        key.etag  # computed once, before the fillers share the key's value  # noqa: B018
    for version in range(versions):
        for rest in (".json", ".crc") + ((".checkpoint.parquet",) if version and
                                         version % CHECKPOINT_INTERVAL == 0 else ()):
            if rest in sources:
                name = f"{prefix}{version:020d}{rest}"
                put_key(keys, name, renamed(sources[rest], name))
    # through a request: a PUT gives the object the etag and checksum of its new text
    info = json.loads(keys[f"{prefix}_last_checkpoint"].value)
    info["version"] += versions
    info.pop("checksum", None)
    emulator.client().put_object(Bucket=bucket, Key=f"{prefix}_last_checkpoint",
                                 Body=json.dumps(info, separators=(",", ":")).encode())
    return len(names_under(keys, prefix))


def _local_table(spark: Any, tmp: str, days: float) -> tuple[str, int]:
    """A fresh local table aged ``days``: its path and the files in its log."""
    path = f"{tmp}/age-{days:g}"
    _fresh_table(spark, path)
    return path, age_log(Path(path) / "_delta_log", retained(days))


def _fresh_table(spark: Any, path: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES "
              f"('delta.checkpointInterval' = '{CHECKPOINT_INTERVAL}')")
    for _ in range(CHECKPOINT_INTERVAL + 10):  # a checkpoint and commits after it
        spark.range(1).write.format("delta").mode("append").save(path)


def _settings(storage: str, store: str, endpoint: str | None) -> Any:
    from pipeline.config import load_settings

    settings = load_settings(ROOT / "conf" / "test.yaml", env={})
    stream: dict[str, Any] = {"delta_log_store": store}
    update: dict[str, Any] = {}
    if storage == "s3":
        stream["lake_dir"] = f"s3a://{S3_BUCKET}/lake"
        update["object_store"] = settings.object_store.model_copy(
            update={"endpoint": endpoint, "path_style_access": True})
    update["stream"] = settings.stream.model_copy(update=stream)
    return settings.model_copy(update=update)


def child(storage: str, store: str, ages: list[float], commits: int,
          budget_s: float) -> list[dict[str, Any]]:
    """One (storage, store)'s rows, in this process's own Spark driver (and, for S3, its own
    emulator: a thread of this process the driver's S3A reaches over HTTP)."""
    with contextlib.ExitStack() as stack:
        emulator = None
        if storage == "s3":
            from devtools import s3_emulator

            os.environ.update(s3_emulator.CREDENTIALS)  # the JVM inherits them
            emulator = stack.enter_context(s3_emulator.running(buckets=(S3_BUCKET,)))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="log-age-"))
        return _rows(storage, store, emulator, tmp, ages, commits, budget_s)


def _rows(storage: str, store: str, emulator: Any, tmp: str, ages: list[float], commits: int,
          budget_s: float) -> list[dict[str, Any]]:
    from pipeline.spark.engine.session import build_session

    spark = build_session(_settings(storage, store, emulator and emulator.endpoint))
    jvm = spark.sparkContext._jvm
    rows = []
    for days in ages:
        if emulator is None:
            path, files = _local_table(spark, tmp, days)
        else:
            path = f"s3a://{S3_BUCKET}/age-{days:g}"
            _fresh_table(spark, path)
            files = age_s3_log(emulator, S3_BUCKET, f"age-{days:g}/_delta_log", retained(days))
        jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the renamed log afresh
        before = emulator.snapshot() if emulator else None
        times, lists = _timed_appends(spark, path, commits, budget_s, emulator)
        requests = {op: round(n / len(times), 1) for op, n in
                    sorted((emulator.snapshot() - before).items())} if emulator else {}
        parts = _timed_parts(spark, path, len(times)) if store == "probing" else {}
        count = spark.read.format("delta").load(path).count()
        rows.append({"storage": storage, "store": store, "age_days": days, "log_files": files,
                     "versions": retained(days) + CHECKPOINT_INTERVAL + 11,
                     "commits": len(times), "rows_after": count,
                     "p50_ms": statistics.median(times), "mean_ms": statistics.mean(times),
                     "max_ms": max(times), "requests_per_append": requests,
                     "times_ms": [round(t) for t in times], "lists": lists,
                     "parts_p50_ms": {k: statistics.median(v) for k, v in parts.items()},
                     "parts_ms": {k: [round(t, 1) for t in v] for k, v in parts.items()}})
        print(json.dumps(rows[-1]), flush=True)
    spark.stop()
    return rows


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ages", default="0,1,7,30", help="days (0,1,7,30)")
    p.add_argument("--stores", default="probing,hadoop", help="log stores (probing,hadoop)")
    p.add_argument("--storage", default="local,s3",
                   help="where the tables are: local disk, moto's S3 (local,s3)")
    p.add_argument("--commits", type=int, default=120, help="appends timed per age (120)")
    p.add_argument("--budget", type=float, default=180.0,
                   help="seconds of appends per age at most (180)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    ages = [float(a) for a in args.ages.split(",")]
    if args.child:
        storage, store = args.child.split(":")
        child(storage, store, ages, args.commits, args.budget)
        return 0
    rows: list[dict[str, Any]] = []
    for storage in args.storage.split(","):
        for store in args.stores.split(","):
            done = subprocess.run(
                [sys.executable, __file__, "--child", f"{storage}:{store}", "--ages", args.ages,
                 "--commits", str(args.commits), "--budget", str(args.budget)],
                cwd=ROOT, capture_output=True, text=True)
            got = [json.loads(line) for line in done.stdout.splitlines()
                   if line.startswith("{")]
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            rows += got
    print(table(rows))
    out = ROOT / ".bench" / f"log-age-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"rows saved in {out.relative_to(ROOT)}")
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as BENCHMARKS.md's table."""
    lines = ["| storage | store | age (days) | files in _delta_log | appends | p50 ms | mean ms "
             "| slowest ms | S3 requests per append | list / snapshot / commit p50 ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        asked = ", ".join(f"{op} {n:g}" for op, n in r.get("requests_per_append", {}).items())
        parts = r.get("parts_p50_ms") or {}
        split = " / ".join(f"{parts[p]:,.0f}" for p in ("list", "snapshot", "commit")
                           if p in parts)
        lines.append(f"| {r.get('storage', 'local')} | {r['store']} | {r['age_days']:g} | "
                     f"{r['log_files']:,} | {r['commits']} | {r['p50_ms']:,.0f} | "
                     f"{r['mean_ms']:,.0f} | {r['max_ms']:,.0f} | {asked or '–'} | "
                     f"{split or '–'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
