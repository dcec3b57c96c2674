"""Direct writer, task side: the state tasks write the bulk tables' Parquet files themselves.

Why: every batch lands rows in four tables (transactions, records, images, status_events).
Appending them with Spark costs one Spark job and one commit per table, plus a JSON hand-over
(encode in Python, ``from_json`` in the JVM) of every row: on the 2-core machine more than
the raw Kafka→Delta passthrough needs for its whole batch (decision 0002). The state task
already holds those rows in Python, so it writes them with pyarrow (one file per table and
call) and hands the driver a small description of each file; the driver commits the files
with delta-spark's own transaction (``pipeline.spark.land.committer``): one commit per table,
no Spark job.

What one state call does with its table rows (:meth:`DataFiles.split`):

* rows of ``DIRECT_TABLES`` go to one Parquet file per table under the table's folder; the
  call's output carries one ``FILES_TABLE`` row per file (table, path relative to the table,
  size, rows, modification time, Delta statistics; for the landed transactions' tables the
  subscriptions whose rows it holds);
* rows a later stage of the same batch reads stay in the output as JSON as well ("mirrors"):
  the lifecycle statuses (``pipeline.spark.typed.lifecycle``), and the transactions, records
  and images of the ``mirror_subscriptions`` (none in the job: the typed step reads this
  batch's files themselves, ``pipeline.spark.typed.direct``);
* every other table (gaps, alerts, requests, quarantine, …) stays JSON, appended by Spark.

The files carry ``batch_id`` like every landed row; the task learns it from the Spark local
property :data:`BATCH_PROPERTY`, which the sink sets before it runs the batch.

Statistics follow Delta's own (numRecords; nullCount of the first ``stats_columns`` columns;
min/max only where they are exact: integer columns, and strings of at most 32 characters,
Delta's prefix length). Columns without min/max are never skipped, so a query's answer cannot
depend on them; tests compare them with the statistics delta-spark writes for the same rows.

A file a task wrote for a batch that never commits (a crash, a retried task, a replay that
finds the batch landed) is not in the Delta log: readers never see it, and ``VACUUM`` removes
it like any other unreferenced file.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pipeline.config import Settings
from pipeline.objectstore import S3Access, access, is_object_store, pyarrow_path
from pipeline.reassembly.tables import Columns, columns_to_rows
from pipeline.spark.land.tables import DIRECT_TABLES, arrow_schema, table_path
from pipeline.typed.lifecycle import LIFECYCLE_STATUSES

FILES_TABLE = "_files"
BATCH_PROPERTY = "urbpipe.batch_id"
#: Delta's ``delta.dataSkippingStringPrefixLength`` default: longer strings get truncated
#: bounds, which this writer does not reproduce (it leaves such a column's min/max out).
STRING_PREFIX = 32


def writer_mode(settings: Settings) -> str:
    """``direct`` or ``spark``: ``stream.raw_writer``, with ``auto`` = direct for a lake on
    the local file system (or file://), Spark for every other scheme (s3a://, abfss:// …),
    whose credentials the JVM has but a Python worker may not. ``direct`` on s3a:// writes
    through pyarrow's S3 file system, with ``object_store``'s endpoint and addressing and the
    worker's environment credentials (``pipeline.objectstore``)."""
    mode = settings.stream.raw_writer
    if mode != "auto":
        return mode
    scheme = urlparse(settings.location(settings.stream.lake_dir)).scheme
    return "direct" if scheme in ("", "file") else "spark"


def data_files(settings: Settings, tables: Sequence[str] = DIRECT_TABLES) -> DataFiles | None:
    """The task-side writer for this conf (of ``tables``: the bulk tables by default), or
    None when Spark appends every table."""
    if writer_mode(settings) != "direct":
        return None
    store = None
    if is_object_store(settings.location(settings.stream.lake_dir)):
        store = access(settings)  # endpoint/region resolved once, on the driver
    return DataFiles(
        paths={t: table_path(settings, t) for t in tables},
        stats_columns=settings.stream.delta_stats_columns,
        # the typed step reads the batch's transactions, records and images from these
        # files (pipeline.spark.typed.direct): no mirrors of them
        mirror_subscriptions=frozenset(),
        mirror_statuses=frozenset(LIFECYCLE_STATUSES), store=store)


@dataclass(frozen=True)
class DataFiles:
    """What a state task needs to write its bulk rows itself (pickled into the task)."""

    paths: Mapping[str, str]               # table -> folder (local path or URI)
    stats_columns: int                     # Delta's dataSkippingNumIndexedCols (-1: all)
    mirror_subscriptions: frozenset[str]   # typed layouts read these rows from the batch
    mirror_statuses: frozenset[str]        # the lifecycle step reads these statuses
    store: S3Access | None = None          # an s3a:// lake's store (no secrets in it)

    def split(self, tables: dict[str, list[dict[str, Any]]], columns: Columns, batch_id: int
              ) -> dict[str, list[dict[str, Any]]]:
        """Write the direct tables (the landed transactions' ``columns``, ``tables``' rows of
        the others); return what stays in the output: JSON rows of the other tables, the
        mirrors, and one ``FILES_TABLE`` row per file written."""
        import pyarrow as pa

        out = {t: rows for t, rows in tables.items() if t not in self.paths}
        files: list[dict[str, Any]] = []
        for table, cols in columns.items():
            subs = cols["subscription"]
            if not len(subs):
                continue
            names = set(subs)
            files.append({**self._write(table, [pa.array(cols[f.name], f.type)
                                                for f in arrow_schema(table) if f.name in cols],
                                        batch_id),
                          # whose rows: the typed step reads only its files' subscriptions
                          "subscriptions": sorted(str(s) for s in names)})
            if self.mirror_subscriptions.intersection(names):
                keep = [i for i, s in enumerate(subs) if s in self.mirror_subscriptions]
                out[table] = columns_to_rows(table, cols, keep)
        statuses = tables.get("status_events") or []
        if statuses:
            files.append(self.write_rows("status_events", statuses, batch_id))
            mirrors = [r for r in statuses if r.get("st") in self.mirror_statuses]
            if mirrors:
                out["status_events"] = mirrors
        out[FILES_TABLE] = files
        return out

    def write_rows(self, table: str, rows: list[dict[str, Any]], batch_id: int
                   ) -> dict[str, Any]:
        """One Parquet file of ``rows`` (dicts of the table's columns but ``batch_id``): for a
        few rows the driver itself commits (``pipeline.spark.land.watermark``)."""
        import pyarrow as pa

        schema = arrow_schema(table)
        data = pa.Table.from_pylist(rows, schema=schema.remove(
            schema.get_field_index("batch_id")))
        return self._write(table, data.columns, batch_id)

    def _write(self, table: str, arrays: list[Any], batch_id: int) -> dict[str, Any]:
        """One Parquet file of ``arrays`` (the table's columns but ``batch_id``, in order)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = arrow_schema(table)
        n = len(arrays[0])
        data = pa.Table.from_arrays(
            [*arrays, pa.repeat(pa.scalar(batch_id, pa.int64()), n)], schema=schema)
        fs, folder = _filesystem(self.paths[table], self.store)
        name = f"part-{batch_id:010d}-{uuid.uuid4().hex}.snappy.parquet"
        pq.write_table(data, f"{folder}/{name}", filesystem=fs, compression="snappy",
                       use_dictionary=dictionary_columns(schema))
        info = fs.get_file_info(f"{folder}/{name}")
        return {"table": table, "path": name, "size": int(info.size), "rows": data.num_rows,
                "modification_time": int(info.mtime.timestamp() * 1000),
                "stats": json.dumps(delta_stats(data, self.stats_columns),
                                    separators=(",", ":"))}


def dictionary_columns(schema: Any) -> list[str]:
    """The columns worth a Parquet dictionary: strings, flags and 32-bit codes (names, kinds,
    file numbers: a few distinct values per file). Image payloads, sequence numbers and times
    are nearly all distinct: pyarrow would build a dictionary for each, find it too large and
    fall back, which cost ~17% of the tasks' Parquet time (BENCHMARKS.md "Two transaction
    shapes") for ~5% smaller files."""
    import pyarrow as pa

    return [f.name for f in schema
            if pa.types.is_string(f.type) or pa.types.is_boolean(f.type)
            or pa.types.is_int32(f.type)]


#: One pyarrow S3 file system per worker process and store: building one starts the AWS SDK's
#: client (threads, connection pool), far too much for every file of every state call.
_S3: dict[S3Access, Any] = {}


def _filesystem(folder: str, store: S3Access | None = None) -> tuple[Any, str]:
    """A pyarrow file system and the folder's path on it: local paths, ``s3a://`` through
    ``store`` (pyarrow has no ``s3a`` scheme, and its own URI parsing would ignore the conf's
    endpoint and addressing), and any other URI pyarrow knows (gs://, hdfs://, abfs://)."""
    from pyarrow import fs

    if urlparse(folder).scheme in ("", "file"):
        path = folder[len("file://"):] if folder.startswith("file://") else folder
        return fs.LocalFileSystem(), path
    if is_object_store(folder):
        if store is None:
            raise ValueError(f"{folder}: an s3a:// lake needs the object_store settings")
        if store not in _S3:
            _S3[store] = store.filesystem()
        return _S3[store], pyarrow_path(folder)
    return fs.FileSystem.from_uri(folder)


def delta_stats(data: Any, indexed: int) -> dict[str, Any]:
    """Delta's per-file statistics for the first ``indexed`` columns (-1: all), exact only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = data.schema.names if indexed < 0 else data.schema.names[:indexed]
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in names:
        column = data.column(name)
        nulls[name] = column.null_count
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
            continue
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is None or (isinstance(hi, str) and len(hi) > STRING_PREFIX) \
                or (isinstance(lo, str) and len(lo) > STRING_PREFIX):
            continue
        low[name], high[name] = lo, hi
    return {"numRecords": data.num_rows, "minValues": low, "maxValues": high,
            "nullCount": nulls}


def task_batch_id() -> int:
    """The streaming batch this task computes (set by the sink, :data:`BATCH_PROPERTY`)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty(BATCH_PROPERTY) if context is not None else None
    if value is None:
        raise RuntimeError(f"no Spark local property {BATCH_PROPERTY}: the direct writer runs "
                           "only inside the job's foreachBatch "
                           "(pipeline/spark/land/batch_writer.py)")
    return int(value)
