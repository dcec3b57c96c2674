"""The S3 half of tests/spark/land/test_log_store.py, run as a process of its own: a Spark
driver whose lake is on the S3 emulator (devtools/s3_emulator.py, a thread of this process).

Why a process: the suite's shared session is a local lake's, without hadoop-aws; an S3 lake's
session is built at start (its jars, ``fs.s3a.*``, ``spark.delta.logStore.s3a.impl``).

It makes a real table on S3 through the job's session (``build_session``: the project's S3
log store), then reports as JSON on stdout what the test asserts: the session's store class;
each start's listing by the project's store and by Delta's ``S3SingleDriverLogStore``; the
LIST requests of a listing from the newest version, with both stores, before and after the log
is aged by ``AGED`` versions; what a write does (requests, an existing file refused, an
overwrite); a missing folder's listing; and the table's rows after appends on the aged log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.spark.land.test_log_store import COMMITS, INTERVAL, _starts  # noqa: E402

BUCKET = "log-store"
AGED = 20_000  # versions added below the table's: 40,000 keys, 40 LIST pages


def _listing(jvm: Any, conf: Any, store: Any, folder: str, start: str) -> list[str]:
    found = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{folder}/{start}"), conf)
    names = []
    while found.hasNext():
        names.append(found.next().getPath().getName())
    return names


def _lists(emulator: Any, call: Any) -> dict[str, int]:
    """The requests ``call`` made, by operation."""
    before = emulator.snapshot()
    call()
    return dict(emulator.snapshot() - before)


def _java_class(exc: Exception) -> str:
    """The JVM exception's class name behind py4j's error."""
    java = getattr(exc, "java_exception", None)
    return str(java.getClass().getName()) if java is not None else repr(exc)


def _write_checks(spark: Any, store: Any, emulator: Any, log: str) -> dict[str, Any]:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    lines = jvm.java.util.ArrayList()
    lines.add('{"commitInfo":{}}')
    target = jvm.org.apache.hadoop.fs.Path(f"{log}/{10 ** 9:020d}.json")
    report: dict[str, Any] = {"write": _lists(
        emulator, lambda: store.write(target, lines.iterator(), False, conf))}
    try:
        store.write(target, lines.iterator(), False, conf)
        report["again"] = "written"
    except Exception as exc:  # py4j wraps the JVM's exception
        report["again"] = _java_class(exc)
    store.write(target, lines.iterator(), True, conf)
    report["overwritten"] = _listing(jvm, conf, store, log, f"{10 ** 9:020d}.")
    emulator.client().delete_object(Bucket=BUCKET, Key=f"t/_delta_log/{10 ** 9:020d}.json")
    try:
        _listing(jvm, conf, store, f"s3a://{BUCKET}/missing/_delta_log", f"{0:020d}.")
        report["missing"] = "listed"
    except Exception as exc:
        report["missing"] = _java_class(exc)
    return report


def run(emulator: Any) -> dict[str, Any]:
    from benchmarks.delta_log_age import age_s3_log
    from pipeline.config import load_settings
    from pipeline.spark.engine.session import build_session

    settings = load_settings(ROOT / "conf" / "test.yaml", env={})
    settings = settings.model_copy(update={
        "stream": settings.stream.model_copy(update={"lake_dir": f"s3a://{BUCKET}/lake"}),
        "object_store": settings.object_store.model_copy(
            update={"endpoint": emulator.endpoint, "path_style_access": True})})
    spark = build_session(settings)
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    table, log = f"s3a://{BUCKET}/t", f"s3a://{BUCKET}/t/_delta_log"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT) USING delta "
              f"TBLPROPERTIES ('delta.checkpointInterval' = '{INTERVAL}')")
    for i in range(COMMITS):
        spark.range(i, i + 1).write.format("delta").mode("append").save(table)
    ours = jvm.urbpipe.delta.StartAfterS3LogStore(conf)
    deltas = jvm.io.delta.storage.S3SingleDriverLogStore(conf)
    report: dict[str, Any] = {
        "impl": spark.conf.get("spark.delta.logStore.s3a.impl"),
        "listings": {s: [_listing(jvm, conf, ours, log, s), _listing(jvm, conf, deltas, log, s)]
                     for s in _starts(COMMITS)},
    }
    newest = f"{COMMITS:020d}."
    for label in ("fresh", "aged"):
        if label == "aged":
            report["aged_keys"] = age_s3_log(emulator, BUCKET, "t/_delta_log", AGED)
            newest = f"{AGED + COMMITS:020d}."
        report[label] = {
            name: _lists(emulator, lambda s=store, n=newest: _listing(jvm, conf, s, log, n))
            for name, store in (("ours", ours), ("deltas", deltas))}
    report.update(_write_checks(spark, ours, emulator, log))
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    for i in range(COMMITS, COMMITS + 3):
        spark.range(i, i + 1).write.format("delta").mode("append").save(table)
    report["rows"] = spark.read.format("delta").load(table).count()
    spark.stop()
    return report


def main() -> int:
    from devtools import s3_emulator

    os.environ.update(s3_emulator.CREDENTIALS)  # the driver's JVM inherits them
    with s3_emulator.running(buckets=(BUCKET,)) as emulator:
        print(json.dumps(run(emulator)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
