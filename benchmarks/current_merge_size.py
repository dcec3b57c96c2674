"""What a batch's MERGE into a typed ``current_`` table costs as the table grows.

The direct typed writer MERGEs each batch's changes into the file's current table with
delta-rs (``pipeline.spark.typed.file_writer``: ``t.isn = s.isn``, update, insert, delete).
delta-rs has no deletion vectors to write (copy-on-write only), so a data file holding one
updated ISN is rewritten whole. This measures that on tables of ``--rows`` rows, built as the
job builds them (one file per batch of inserts, ``--batch-inserts`` rows each), engine-free,
one process: ``--merges`` MERGEs of one batch each (new ISNs plus ``--updates`` updates of
ISNs drawn at random from the table), their median time and delta-rs's own metrics (target
files scanned and rewritten, rows copied).

Run from the repository root::

    .venv/bin/python benchmarks/current_merge_size.py                       # 100k, 1M, 3M rows
    .venv/bin/python benchmarks/current_merge_size.py --rows 100000 --updates 0
    .venv/bin/python benchmarks/current_merge_size.py --rows 1000000 --engine spark-dv

``--engine spark`` and ``spark-dv`` run the same MERGE with delta-spark from a driver (the
project's test session: ``local[2]``, 2 GB), the table as delta-rs built it, with
``delta.enableDeletionVectors`` off or on: what committing ``current_`` from the driver
would cost, the way that writes deletion vectors instead of copying.

The rows are ~EMPLOYEE's width (the bench template's layout: 12 fields of text and numbers);
what grows with the table is the copy, whatever the width.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / ".bench"


def rows(isns: np.ndarray, seed: int) -> pa.Table:
    """Current-table rows of these ISNs: a key, text and number fields, the version columns."""
    rng = np.random.default_rng(seed)
    n = len(isns)
    text = np.array([f"NAME-{i:08d}" for i in rng.integers(0, 10**8, n)], dtype=object)
    cols: dict[str, Any] = {"isn": pa.array(isns, pa.int64())}
    for i in range(5):
        cols[f"text_{i}"] = pa.array(np.roll(text, i), pa.string())
    for i in range(5):
        cols[f"num_{i}"] = pa.array(rng.integers(0, 10**9, n), pa.int64())
    cols["commit_time"] = pa.array(rng.integers(1, 10**15, n), pa.int64())
    cols["tsnr"] = pa.array(rng.integers(1, 10**9, n), pa.int64())
    return pa.table(cols)


def build(path: str, size: int, per_file: int, rng: np.random.Generator) -> np.ndarray:
    """A table of ``size`` rows in files of ``per_file`` (one append per file, as a batch's
    inserts land); the ISNs it holds."""
    from deltalake import write_deltalake

    isns = rng.choice(size * 4, size=size, replace=False).astype(np.int64)
    for start in range(0, size, per_file):
        write_deltalake(path, rows(isns[start:start + per_file], start), mode="append")
    return isns


def merge_once(path: str, held: np.ndarray, inserts: int, updates: int,
               rng: np.random.Generator, spark: Any = None
               ) -> tuple[float, dict[str, Any], np.ndarray]:
    """One batch's MERGE, as the job's (``t.isn = s.isn``; update when matched, insert when
    not), by delta-rs or, given a session, delta-spark; its seconds, the engine's metrics
    (in delta-rs's names) and the table's ISNs after it."""
    fresh = np.setdiff1d(rng.integers(0, held.max() * 2, inserts * 2), held)[:inserts]
    changed = rng.choice(held, size=updates, replace=False) if updates else held[:0]
    source = rows(np.concatenate([fresh, changed]), int(rng.integers(1 << 30)))
    merge = _spark_merge if spark is not None else _rs_merge
    seconds, metrics = merge(path, source, spark)
    return seconds, metrics, np.concatenate([held, fresh])


def _rs_merge(path: str, source: pa.Table, _: Any) -> tuple[float, dict[str, Any]]:
    from deltalake import DeltaTable

    assign = {f'"{n}"': f's."{n}"' for n in source.schema.names}
    started = time.perf_counter()
    metrics = (DeltaTable(path).merge(source, "t.isn = s.isn", source_alias="s",
                                      target_alias="t")
               .when_matched_update(assign).when_not_matched_insert(assign).execute())
    return time.perf_counter() - started, metrics


#: delta-spark's MERGE metrics under delta-rs's names.
_SPARK_METRICS = {"num_target_files_scanned": "numTargetFilesAfterSkipping",
                  "num_target_files_removed": "numTargetFilesRemoved",
                  "num_target_rows_copied": "numTargetRowsCopied",
                  "num_target_rows_updated": "numTargetRowsUpdated",
                  "num_target_rows_inserted": "numTargetRowsInserted",
                  "num_deletion_vectors_added": "numTargetDeletionVectorsAdded"}


def _spark_merge(path: str, source: pa.Table, spark: Any) -> tuple[float, dict[str, Any]]:
    """The MERGE by delta-spark, its source cached first (timed: the MERGE alone)."""
    from delta.tables import DeltaTable

    frame = spark.createDataFrame(source.to_pandas()).cache()
    frame.count()
    started = time.perf_counter()
    (DeltaTable.forPath(spark, path).alias("t").merge(frame.alias("s"), "t.isn = s.isn")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    seconds = time.perf_counter() - started
    frame.unpersist()
    done = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["operationMetrics"]
    return seconds, {mine: int(done.get(theirs, 0)) for mine, theirs in _SPARK_METRICS.items()}


def spark_session(engine: str) -> Any:
    """The test conf's session for a delta-spark engine (None for delta-rs)."""
    if engine == "delta-rs":
        return None
    from pipeline.config import load_settings
    from pipeline.spark.engine.session import build_session

    spark = build_session(load_settings(ROOT / "conf" / "test.yaml", env={}))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(size: int, args: argparse.Namespace, scratch: Path = BENCH_DIR,
            spark: Any = None) -> dict[str, Any]:
    """One table size's figures; the table is built in a folder under ``scratch``, then
    deleted; given a session, MERGEd by delta-spark (deletion vectors per ``args.engine``)."""
    rng = np.random.default_rng(args.seed)
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        path = f"{folder}/current"
        began = time.perf_counter()
        held = build(path, size, args.batch_inserts, rng)
        built_s = time.perf_counter() - began
        if spark is not None:
            dv = str(args.engine == "spark-dv").lower()
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                      f"('delta.enableDeletionVectors' = '{dv}')")
        runs = []
        for _ in range(args.merges):
            seconds, metrics, held = merge_once(path, held, args.batch_inserts, args.updates,
                                                rng, spark)
            runs.append((seconds, metrics))
    last = runs[-1][1]
    return {"rows": size, "files": -(-size // args.batch_inserts), "built_s": built_s,
            "merge_s": statistics.median(s for s, _ in runs),
            "merges_s": [round(s, 3) for s, _ in runs],
            "files_scanned": last.get("num_target_files_scanned"),
            "files_rewritten": last.get("num_target_files_removed"),
            "rows_copied": last.get("num_target_rows_copied"),
            "rows_updated": last.get("num_target_rows_updated"),
            "rows_inserted": last.get("num_target_rows_inserted"),
            "deletion_vectors": last.get("num_deletion_vectors_added", 0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="100000,1000000,3000000",
                   help="table sizes, comma-separated")
    p.add_argument("--batch-inserts", type=int, default=35_000,
                   help="new ISNs per batch (and rows per file of the built table)")
    p.add_argument("--updates", type=int, default=208, help="updated ISNs per batch")
    p.add_argument("--merges", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", choices=("delta-rs", "spark", "spark-dv"), default="delta-rs",
                   help="who MERGEs: delta-rs (the job's), delta-spark copying, or delta-spark "
                        "with deletion vectors")
    args = p.parse_args(argv)
    spark = spark_session(args.engine)
    print(f"engine {args.engine}")
    print(f"{'rows':>10} {'files':>6} {'merge s':>8} {'scanned':>8} {'rewritten':>9} "
          f"{'rows copied':>12} {'updated':>8} {'inserted':>8} {'DVs':>5}")
    results = []
    for size in (int(s) for s in args.rows.split(",")):
        r = measure(size, args, spark=spark)
        results.append(r)
        print(f"{r['rows']:>10,} {r['files']:>6} {r['merge_s']:>8.2f} "
              f"{r['files_scanned'] or 0:>8} {r['files_rewritten'] or 0:>9} "
              f"{r['rows_copied'] or 0:>12,} {r['rows_updated'] or 0:>8} "
              f"{r['rows_inserted'] or 0:>8} {r['deletion_vectors'] or 0:>5}", flush=True)
    out = BENCH_DIR / f"current-merge-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(f"results: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
