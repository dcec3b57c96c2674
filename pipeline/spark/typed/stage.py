"""Typed tables per configured file: ``changes_``, ``current_``, ``tombstones_``, ``history_``.

Runs inside foreachBatch after the raw tables are committed, from the same batch, one of two
ways (the rules below are the same; both are held to the reference models):

* **direct** (``stream.raw_writer`` direct on a lake of the file system: a local lake by
  default; ``tables.direct_typed``): the batch's
  transactions, records and images are the state tasks' Parquet files; the decode specs and
  refresh cutoffs are worked out here once, and the tasks of one Spark job land every file's
  tables through delta-rs, column-wise (``pipeline.spark.typed.direct``, ``file_writer``;
  ``pipeline.typed.frames`` are the rules on columns). What it costs grows with the batch's
  rows, not with the number of files (BENCHMARKS.md "Typed tables over a files axis"). A file
  whose tables carry a feature delta-rs cannot write (a column widened in place) is landed
  the Spark way from the same files.
* **Spark** (``stream.raw_writer`` spark, or an object-store lake), file after file, as the
  points below say:

1. transactions ⋈ records ⋈ images of the batch. Initial-state pseudo-transactions all have
   tsnr 0 and restart rsnr at 1, so (destination, subscription, epoch, tsnr, rsnr) is not unique
   in a batch; the n-th tsnr-0 transaction of a key is matched with the n-th occurrence of each
   rsnr/dsnr, in the order the state function emitted them (``_seq``: the batch is persisted,
   so ``monotonically_increasing_id`` numbers its rows the same way on every read).
2. The after and before images (A, B) of each configured file are decoded by
   ``pipeline.typed.decode_rows`` (mapInPandas, one PayloadDecoder per form per partition);
   K images (the key before the image, not the record) stay in the raw ``images`` table.
   Good rows append to the change table; images that do not match the layout append to
   ``quarantine`` (source ``payload``).
3. The file's records become changes (action + the values of their own image), reduced to one
   per ISN (the newest, see ``pipeline.typed.versioning``) and MERGEd into the current table
   under a version guard. With ``deletes: remove`` a delete leaves a tombstone (its version) in
   ``tombstones_<sub>_<fnr>``: the MERGE source drops changes a tombstone buries, a second
   MERGE keeps the tombstones and purges those past ``tombstone_retention_days``.
4. With ``history: true`` every version of the ISNs the batch touches is recomputed
   (``pipeline.typed.history``) and MERGEd into ``history_<sub>_<fnr>`` (SCD type 2).
5. Refresh/define file: ``pipeline.spark.typed.lifecycle`` truncates the current table, clears the
   older tombstones and closes the open history intervals at the cutoff, and records it as
   ``truncated_before`` in ``file_status``. Here the file's cutoffs (read once per batch) keep
   a change committed before the latest one (a late batch, a resend) out of the current and
   tombstone MERGEs — it is still appended to ``changes_`` — and end the history intervals of
   older versions at the first cutoff after them (``pipeline.typed.history.closed_at``).
   Either order within a batch is right: the job writes the typed tables first and the
   lifecycle then, so the batch's own refresh is not yet in ``file_status`` and its truncate
   removes/closes what the batch's pre-cutoff changes wrote; were the lifecycle first, the
   cutoff would be read here and the changes filtered. The read is the same on a replay: a
   batch's ``file_status`` rows exist only once all its typed MERGEs committed (skipped then),
   and ``file_status`` is written by nothing here, so sources stay the same across the MERGEs.

Exactly once: appends carry txnAppId/txnVersion; each MERGE reads them from the session conf
(``spark.databricks.delta.write.txnAppId``/``txnVersion``), set just before and unset right
after, never concurrently with another writer of this session. A crash between two MERGEs of a
batch is safe: the replay skips the committed ones, and the sources of the others give the same
rows whatever the committed ones changed (see ``unburied``, ``history_source``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.config import Layout, Settings
from pipeline.payload import spark_ddl
from pipeline.reassembly.pseudo import RECONCILE_ORIGIN as RECONCILE
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.tables import table_path
from pipeline.spark.land.writes import append_once, append_rows
from pipeline.spark.typed.changes import (
    joined_rows,
    joined_rows_from_files,
    quarantine_rows,
    record_changes,
)
from pipeline.spark.typed.history import history_source, merge_history
from pipeline.spark.typed.merge import (
    file_cutoffs,
    merge_current,
    merge_source,
    merge_tombstones,
    since_cutoff,
    unburied,
)
from pipeline.spark.typed.reconcile import versions_arrived
from pipeline.spark.typed.stream_layouts import (
    NextLayouts,
    prepare_file,
    read_versions,
    value_columns,
)
from pipeline.spark.typed.tables import (
    CHANGE_KEYS_DDL,
    TypedTableSet,
    changes_table,
    current_table,
    decode_spec,
    direct_typed,
    form,
    history_table,
    tombstones_table,
    value_tables,
)
from pipeline.typed.decoding import ERROR_COLUMN, DecodeSpec, VersionedSpec, decode_rows
from pipeline.typed.layouts import FileLayouts, column_types
from pipeline.typed.widening import widen_steps

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("urbpipe.typed")
_DAY_US = 86_400_000_000


class TypedTables:
    """Landing step (with conf layouts): the typed tables, after the raw ones. Only when the
    batch holds what they are made of (records, or GFFT layouts); a batch without them is the
    common idle case (transformWithState runs one at every trigger) and the typed step's jobs
    would cost it about a second: then the tables are only made sure to exist. With the
    direct writer (``stream.raw_writer``) the records are in the state tasks' files, and the
    tasks of one Spark job land every file's tables (``pipeline.spark.typed.direct``)."""

    lap = "t_typed_ms"

    def __init__(self, settings: Settings, tables: TypedTableSet,
                 layouts: NextLayouts | None = None) -> None:
        self._settings = settings
        self._tables = tables
        self._layouts = layouts
        self._direct = direct_typed(settings)

    def land(self, batch: LandedBatch) -> dict[str, int]:
        files = batch.files if self._direct else None
        records = (any(f["table"] == "records" for f in files) if files is not None
                   else bool(batch.rows.get("records")))
        if records or batch.rows.get("layouts"):
            return write_typed_tables(batch.session, batch.frame, batch.batch_id,
                                      self._settings, batch.app_id, self._tables, self._layouts,
                                      files=files, layouts=bool(batch.rows.get("layouts")))
        self._tables.ensure(batch.session)
        return {}


def write_typed_tables(spark: SparkSession, batch: DataFrame, batch_id: int, settings: Settings,
                       app_id: str, tables: TypedTableSet | None = None,
                       next_layouts: NextLayouts | None = None,
                       files: Sequence[Mapping[str, Any]] | None = None,
                       layouts: bool = True) -> dict[str, int]:
    """Land the typed tables of every configured layout for one batch; rows per table.
    ``tables``: the writer's record of the tables made so far (a new one checks them all);
    ``next_layouts`` is told the layout that decodes each file's next images, for the lifecycle
    step of the same batch. ``files``: the direct writer's files of the batch (its records
    are there, not in ``batch``): the tasks land the tables (``pipeline.spark.typed.direct``);
    None: Spark does, from ``batch``'s rows. ``layouts``: whether ``batch`` may hold
    ``layouts`` (GFFT) rows (False: its counts say none, their read is skipped)."""
    if not settings.layouts:
        return {}
    (tables or TypedTableSet(settings)).ensure(spark)
    if files is not None:
        return _write_direct(spark, batch, batch_id, settings, app_id, next_layouts, files,
                             layouts)
    from pyspark.sql import functions as F

    recs, imgs = joined_rows(batch, settings)
    recs = recs.persist()
    counts: dict[str, int] = {}
    try:
        # the files present, with their newest commit time (the tombstones' retention
        # horizon) and their record count: one Spark job
        files_present = (recs.groupBy("subscription", "dbid", "fnr")
                         .agg(F.max(F.unix_micros("commit_time")).alias("newest_us"),
                              F.count("*").alias("records")).collect())
        present = {settings.table_suffix(r["subscription"], r["dbid"], r["fnr"])
                   for r in files_present}
        specs, events, fresh = _specs(spark, settings, batch, batch_id, present)
        if next_layouts is not None and present:  # the versions were read: the specs are final
            next_layouts.known(batch_id, specs)
        if fresh:  # new GFFT versions may read what AUTI said a field became
            events += versions_arrived(spark, settings, specs, fresh, app_id, batch_id,
                                       len(events))
        counts.update(_spark_files(spark, settings, settings.layouts, recs, imgs, specs,
                                   batch_id, app_id, files_present))
        if events:
            append_rows(spark, events, "schema_events", settings, f"{app_id}-gfft", batch_id)
            counts["schema_events_gfft"] = len(events)
    finally:
        recs.unpersist()
    if counts:
        log.info("typed batch %s: %s", batch_id, counts)
    return counts


def _spark_files(spark: SparkSession, settings: Settings, layouts: Sequence[Layout],
                 recs: DataFrame, imgs: DataFrame, specs: Mapping[str, DecodeSpec | VersionedSpec],
                 batch_id: int, app_id: str, files_present: Sequence[Any]) -> dict[str, int]:
    """The Spark way, file after file: decode, append and MERGE each of ``layouts`` that
    the batch has records of (``files_present``: their rows of newest commit and count)."""
    newest = {(r["subscription"], r["dbid"], r["fnr"]): r["newest_us"] for r in files_present}
    records = {(r["subscription"], r["dbid"], r["fnr"]): r["records"] for r in files_present}
    cutoffs = file_cutoffs(spark, settings) if newest else {}
    counts: dict[str, int] = {}
    for lay in layouts:
        key = (lay.subscription, lay.dbid, lay.fnr)
        if key not in newest:
            continue
        horizon = (None if newest[key] is None or lay.tombstone_retention_days is None
                   else newest[key] - int(lay.tombstone_retention_days * _DAY_US))
        started = time.perf_counter()
        written, copied = _write_file(spark, lay, settings, specs[lay.table_suffix()], recs,
                                      imgs, batch_id, app_id, horizon,
                                      cutoffs.get((lay.dbid, lay.fnr), ()))
        counts.update(written)
        counts.update(file_cost(key, (time.perf_counter() - started) * 1000, copied))
        counts[current_table(lay)] = records[key]
    return counts


def _write_direct(spark: SparkSession, batch: DataFrame, batch_id: int, settings: Settings,
                  app_id: str, next_layouts: NextLayouts | None,
                  files: Sequence[Mapping[str, Any]], layouts: bool) -> dict[str, int]:
    """The direct way: the specs and cutoffs here, every file's tables in the tasks of one
    Spark job; a file the tasks leave to Spark (a widened column) the Spark way, from the
    same files."""
    from pipeline.spark.typed.direct import append_quarantine, land_files, raw_inputs

    started = time.perf_counter()
    inputs = raw_inputs(settings, files)
    records = bool(inputs["records"])
    every = {lay.table_suffix() for lay in settings.layouts} if records else set()
    # no per-file schema reads here: the tasks write in each table's own types, and a table
    # widened in place (the case _conf_spec is for) is left to Spark, which reads them
    specs, events, fresh = _specs(spark, settings, batch, batch_id, every, widening=False,
                                  batch_layouts=layouts)
    if next_layouts is not None and records:
        next_layouts.known(batch_id, specs)
    if fresh:
        events += versions_arrived(spark, settings, specs, fresh, app_id, batch_id, len(events))
    counts: dict[str, int] = {}
    if records:
        cutoffs = file_cutoffs(spark, settings)
        planned = time.perf_counter()
        results = land_files(spark, settings, specs, cutoffs, inputs, batch_id, app_id)
        counts["t_typed_plan_ms"] = round((planned - started) * 1000)  # specs and cutoffs
        counts["t_typed_job_ms"] = round((time.perf_counter() - planned) * 1000)
        by_key = {(lay.subscription, lay.dbid, lay.fnr): lay for lay in settings.layouts}
        for result in results:
            lay = by_key[result.key]
            for phase, ms in result.times_ms.items():
                key = f"t_typed_task_{phase}_ms"
                counts[key] = counts.get(key, 0) + round(ms)
            if result.spark:
                continue
            counts.update(file_cost(result.key, result.wall_ms, result.rows_copied))
            counts.update(result.counts)
            counts[current_table(lay)] = result.records
            append_quarantine(spark, settings, result.quarantine, changes_table(lay), app_id,
                              batch_id)
        spark_only = [by_key[r.key] for r in results if r.spark]
        if spark_only:
            counts.update(_spark_fallback(spark, settings, spark_only, batch, inputs,
                                          batch_id, app_id))
    if events:
        append_rows(spark, events, "schema_events", settings, f"{app_id}-gfft", batch_id)
        counts["schema_events_gfft"] = len(events)
    if counts:
        log.info("typed batch %s: %s", batch_id, counts)
    return counts


def file_cost(key: tuple[str, int, int], wall_ms: float, copied: int) -> dict[str, int]:
    """A file's typed cost in the batch, as counts: its wall time (in the task, or on the
    driver the Spark way: ``typed_ms:<subscription>/<dbid>/<fnr>``) and the unchanged rows
    its current and history commits copied (``typed_copied:…``), which grow with its
    tables, not the batch."""
    label = "/".join(str(part) for part in key)
    return {f"typed_ms:{label}": round(wall_ms), f"typed_copied:{label}": copied}


def _spark_fallback(spark: SparkSession, settings: Settings, layouts: Sequence[Layout],
                    batch: DataFrame,
                    inputs: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]], batch_id: int,
                    app_id: str) -> dict[str, int]:
    """Files whose tables delta-rs cannot write, landed by Spark from the batch's files."""
    from pyspark.sql import functions as F

    subset = settings.model_copy(update={"layouts": list(layouts)})
    recs, imgs = joined_rows_from_files(
        spark, subset, {t: [path for path, _ in found] for t, found in inputs.items()})
    recs = recs.persist()
    try:
        files_present = (recs.groupBy("subscription", "dbid", "fnr")
                         .agg(F.max(F.unix_micros("commit_time")).alias("newest_us"),
                              F.count("*").alias("records")).collect())
        # the specs again, with the tables' widened types (the direct path skipped them)
        specs, _, _ = _specs(spark, subset, batch, batch_id,
                             {lay.table_suffix() for lay in layouts})
        return _spark_files(spark, subset, layouts, recs, imgs, specs, batch_id, app_id,
                            files_present)
    finally:
        recs.unpersist()


def _specs(spark: SparkSession, settings: Settings, batch: DataFrame | None, batch_id: int,
           present: set[str], *, widening: bool = True, batch_layouts: bool = True
           ) -> tuple[dict[str, DecodeSpec | VersionedSpec], list[dict[str, Any]],
                      dict[tuple[int, int], Any]]:
    """Each file's decode spec (by table suffix): its GFFT versions with the conf as fallback
    (``pipeline.spark.typed.stream_layouts``), or the conf layout alone; the ``schema_events``
    rows of the GFFT versions first seen in this batch; and the files those versions are of,
    with the newest one's creation time. ``present``: the suffixes of the files the batch has
    records of; ``widening``: give them ``_conf_spec``'s wider types; ``batch_layouts``:
    whether the batch may hold GFFT rows (``read_versions``)."""
    versions = read_versions(spark, settings, batch, batch_id, bool(present), batch_layouts)
    specs: dict[str, DecodeSpec | VersionedSpec] = {}
    events: list[dict[str, Any]] = []
    fresh: dict[tuple[int, int], Any] = {}
    for lay in settings.layouts:
        suffix = lay.table_suffix()
        fv = versions.get(suffix)
        if fv is None or (not fv.layouts.versions and lay.format_buffer):
            specs[suffix] = (_conf_spec(spark, settings, lay, widening and suffix in present)
                             if lay.format_buffer else
                             VersionedSpec(FileLayouts(None), {}, **form(settings, lay),
                                           tod_offset_us=settings.replicator.tod_offset_us))
            continue
        spec, rows = prepare_file(spark, settings, lay, fv, value_tables(lay),
                                  form(settings, lay))
        specs[suffix] = spec
        events += [{**r, "seq": len(events) + i} for i, r in enumerate(rows)]
        for at in (r["at"] for r in rows if r["at"] is not None):
            fresh[(lay.dbid, lay.fnr)] = max(at, fresh.get((lay.dbid, lay.fnr), at))
    return specs, events, fresh


def _conf_spec(spark: SparkSession, settings: Settings, lay: Layout,
               present: bool) -> DecodeSpec | VersionedSpec:
    """The format buffer's spec. Tables that hold a column wider than the buffer reads it
    (the buffer was narrowed after a widening) get the images decoded into their own type:
    Delta refuses an append narrower than the table (``pipeline.typed.widening``)."""
    spec = decode_spec(settings, lay)
    if not present:
        return spec
    types = column_types(spec.layout)
    have = value_columns(spark, table_path(settings, current_table(lay)))
    wider = {c: have[c] for c, t in types.items() if c in have and widen_steps(t, have[c])}
    if not wider:
        return spec
    return VersionedSpec(FileLayouts(spec.layout), {**types, **wider}, **form(settings, lay),
                         tod_offset_us=settings.replicator.tod_offset_us)


def _write_file(spark: SparkSession, lay: Layout, settings: Settings,
                spec: DecodeSpec | VersionedSpec, recs: DataFrame, imgs: DataFrame,
                batch_id: int, app_id: str, horizon_us: int | None,
                cutoffs_us: tuple[int, ...]) -> tuple[dict[str, int], int]:
    """One file's batch: decode and append its images, then MERGE its records; its rows
    per table, and the rows its current and history MERGEs copied unchanged.

    Each image is decoded by the layout ``spec`` picks for its commit time; an image no
    layout can decode (none yet, a refused version, bytes that do not fit) is quarantined.
    """
    from pyspark.sql import functions as F

    values = spec.columns
    mine = ((F.col("subscription") == lay.subscription) & (F.col("dbid") == lay.dbid)
            & (F.col("fnr") == lay.fnr))
    file_imgs = imgs.where(mine).withColumn("_commit_us", F.unix_micros("commit_time"))
    schema = f"{', '.join(f'`{f.name}` {f.dataType.simpleString()}' for f in file_imgs.schema)}"
    value_ddl = (spark_ddl(spec.layout) if isinstance(spec, DecodeSpec)
                 else ", ".join(f"`{c}` {t}" for c, t in spec.types.items()))
    out_ddl = ", ".join(p for p in (schema, value_ddl, f"{ERROR_COLUMN} string") if p)
    decoded = (file_imgs.mapInPandas(lambda it: decode_rows(it, spec), out_ddl)
               .drop("_commit_us").persist())
    try:
        good = decoded.where(F.col(ERROR_COLUMN).isNull())
        bad = decoded.where(F.col(ERROR_COLUMN).isNotNull())
        change_cols = [c.strip().split(" ")[0] for c in CHANGE_KEYS_DDL.split(",")]
        changes = good.select(*change_cols, *[F.col(f"`{v}`") for v in values],
                              F.lit(batch_id).cast("bigint").alias("batch_id"))
        # good and bad images counted in one job (the decode is persisted, not re-run)
        ok = {r["ok"]: r["count"] for r in decoded.groupBy(
            F.col(ERROR_COLUMN).isNull().alias("ok")).count().collect()}
        n_changes, n_bad = ok.get(True, 0), ok.get(False, 0)
        name = changes_table(lay)
        if n_changes:
            append_once(changes, table_path(settings, name), f"{app_id}-{name}", batch_id)
        if n_bad:
            append_once(quarantine_rows(bad, lay, batch_id), table_path(settings, "quarantine"),
                        f"{app_id}-quarantine-{name}", batch_id)
        file_recs = recs.where(mine)
        if not settings.reconcile.repair:  # answers of urbpipe reconcile: changes_ only
            file_recs = file_recs.where(F.col("origin") != RECONCILE)
        copied = 0
        if values:  # a file with no layout yet has no value columns to MERGE
            copied = _merge_file(spark, lay, settings, record_changes(file_recs, good, values),
                                 values, batch_id, app_id, horizon_us, cutoffs_us)
        return {name: n_changes, f"quarantine_{name}": n_bad}, copied
    finally:
        decoded.unpersist()


def _merge_file(spark: SparkSession, lay: Layout, settings: Settings, rows: DataFrame,
                values: list[str], batch_id: int, app_id: str, horizon_us: int | None,
                cutoffs_us: tuple[int, ...]) -> int:
    """The current table (with its tombstones) and the history, each MERGE exactly once;
    the rows the current and history MERGEs copied unchanged.

    Changes older than the file's latest refresh cutoff never reach the current table or the
    tombstones; the history takes them as closed intervals (point 5 of the module doc).
    """
    cur, tomb, hist = current_table(lay), tombstones_table(lay), history_table(lay)
    source = merge_source(since_cutoff(rows, cutoffs_us))
    if lay.deletes == "remove":
        source = unburied(spark, source, table_path(settings, cur), table_path(settings, tomb))
    copied = merge_current(spark, source, table_path(settings, cur), values, lay.deletes,
                           f"{app_id}-{cur}", batch_id)
    if lay.deletes == "remove":
        merge_tombstones(spark, source, table_path(settings, tomb), f"{app_id}-{tomb}",
                         batch_id, horizon_us)
    if lay.history:
        path = table_path(settings, hist)
        copied += merge_history(spark, history_source(spark, rows, path, values, batch_id,
                                                      cutoffs_us),
                                path, values, f"{app_id}-{hist}", batch_id)
    return copied
