"""Typed tables per configured file: ``changes_``, ``current_``, ``tombstones_``, ``history_``.

Runs inside foreachBatch after the raw tables are committed, from the same persisted batch:

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
from typing import TYPE_CHECKING, Any

from pipeline.config import Layout, Settings
from pipeline.payload import spark_ddl
from pipeline.spark.land.sinks import _TS_FORMAT
from pipeline.spark.land.tables import BLOB_COLUMN, SCHEMAS, json_schema, table_path
from pipeline.spark.typed.lifecycle import append_rows
from pipeline.spark.typed.stream_layouts import file_filter as _file_filter
from pipeline.spark.typed.stream_layouts import prepare_file, read_versions, value_columns
from pipeline.typed.decoding import (
    ERROR_COLUMN,
    TYPED_IMAGE_TYPES,
    DecodeSpec,
    VersionedSpec,
    decode_rows,
)
from pipeline.typed.layouts import FileLayouts, column_types
from pipeline.typed.versioning import RSP_ISN_NOT_FOUND
from pipeline.typed.widening import widen_steps

if TYPE_CHECKING:
    from delta.tables import DeltaMergeBuilder
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("urbpipe.typed")
KEYS = ("subscription", "destination", "epoch", "tsnr")
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
CHANGE_KEYS_DDL = (
    "subscription string, destination string, epoch int, tsnr bigint, rsnr bigint, "
    "dsnr bigint, isn bigint, record_type string, image_type string, commit_time timestamp, "
    "origin string")
CURRENT_META_DDL = (
    "deleted boolean, verified boolean, subscription string, destination string, epoch int, "
    "tsnr bigint, rsnr bigint, commit_time timestamp, record_type string, origin string")
TOMBSTONE_DDL = (
    "isn bigint, subscription string, destination string, epoch int, tsnr bigint, rsnr bigint, "
    "commit_time timestamp, record_type string, origin string, batch_id bigint")
INTERVAL_DDL = "valid_from timestamp, valid_to timestamp, is_current boolean"
VERSION = ("commit_time", "epoch", "tsnr", "rsnr")
#: Version, then the tie-breaks of ``pipeline.typed.versioning.order_key``.
ORDER = (*VERSION, "destination", "verified")
META = ("subscription", "destination", "epoch", "tsnr", "rsnr", "commit_time", "record_type",
        "origin")
_DAY_US = 86_400_000_000
_created: set[str] = set()


def decode_spec(settings: Settings, lay: Layout) -> DecodeSpec:
    """The conf layout's spec (``gfft: ignore``, or no GFFT for the file yet)."""
    layout = lay.conf_layout()
    assert layout is not None, "decode_spec needs a format buffer"
    return DecodeSpec(layout, **_form(settings, lay))


def _form(settings: Settings, lay: Layout) -> dict[str, Any]:
    sub = next(s for s in settings.subscriptions if s.name == lay.subscription)
    return {"ebcdic": sub.ebcdic, "codepage": lay.codepage or settings.replicator.codepage,
            "empty": lay.empty}


def changes_table(lay: Layout) -> str:
    return f"changes_{lay.table_suffix()}"


def current_table(lay: Layout) -> str:
    return f"current_{lay.table_suffix()}"


def tombstones_table(lay: Layout) -> str:
    return f"tombstones_{lay.table_suffix()}"


def history_table(lay: Layout) -> str:
    return f"history_{lay.table_suffix()}"


def _values(lay: Layout, values: str | None) -> list[str]:
    """The value columns' DDL as a list part: given, else the conf layout's, else none (a
    GFFT-only file starts with its key columns; the first GFFT adds the values)."""
    conf = lay.conf_layout()
    ddl = values if values is not None else (spark_ddl(conf) if conf is not None else "")
    return [ddl] if ddl else []


def change_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join([CHANGE_KEYS_DDL, *_values(lay, values), "batch_id bigint"])


def current_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join(["isn bigint", *_values(lay, values), CURRENT_META_DDL, "batch_id bigint"])


def history_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join(["isn bigint", *_values(lay, values), INTERVAL_DDL, CURRENT_META_DDL,
                      "batch_id bigint"])


def typed_tables(lay: Layout) -> list[tuple[str, str]]:
    """(name, DDL) of every table a layout writes."""
    tables = [(changes_table(lay), change_ddl(lay)), (current_table(lay), current_ddl(lay))]
    if lay.deletes == "remove":
        tables.append((tombstones_table(lay), TOMBSTONE_DDL))
    if lay.history:
        tables.append((history_table(lay), history_ddl(lay)))
    return tables


def value_tables(lay: Layout) -> list[str]:
    """The tables with the layout's value columns: change, current, history (tombstones keep
    versions only)."""
    return [name for name, _ in typed_tables(lay) if not name.startswith("tombstones_")]


def ensure_typed_tables(spark: SparkSession, settings: Settings) -> None:
    """Create each layout's tables (empty) once per process, so analysts can query early."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    for lay in settings.layouts:
        for name, ddl in typed_tables(lay):
            path = table_path(settings, name)
            if path in _created:
                continue
            builder = (DeltaTable.createIfNotExists(spark).location(path)
                       .addColumns(StructType.fromDDL(ddl)))
            if settings.stream.catalog_schema:
                builder = builder.tableName(f"{settings.stream.catalog_schema}.{name}")
            builder.execute()
            _created.add(path)


# ------------------------------------------------------------------------- batch rows
def _rows(batch: DataFrame, table: str) -> DataFrame:
    """Like sinks.table_frame, keeping the row's position ``_seq`` in the batch."""
    from pyspark.sql import functions as F

    names = [c.strip().split(" ")[0] for c in json_schema(table).split(",")]
    parsed = (batch.where(F.col("table") == table)
              .select(F.from_json("json", json_schema(table),
                                  {"timestampFormat": _TS_FORMAT}).alias("r"), "blob", "_seq"))
    cols = [F.col(f"r.{n}") for n in names]
    if table in BLOB_COLUMN:
        cols.append(F.col("blob").alias(BLOB_COLUMN[table]))
    return parsed.select(*cols, "_seq")


def _occurrence(frame: DataFrame, *extra: str) -> DataFrame:
    """Number repeated keys (tsnr 0) in batch order: the n-th pseudo-transaction's rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*KEYS, *extra).orderBy("_seq")
    return frame.withColumn("occ", F.row_number().over(window)).drop("_seq")


def joined_rows(batch: DataFrame, settings: Settings) -> tuple[DataFrame, DataFrame]:
    """(records, images) of the configured files, each with its transaction's columns.

    Images: the after and before images only (``TYPED_IMAGE_TYPES``); K images (the key
    before the image) are not records and stay in the raw ``images`` table.
    """
    from pyspark.sql import functions as F

    seq = batch.withColumn("_seq", F.monotonically_increasing_id())
    txs = _occurrence(_rows(seq, "transactions")).select(
        *KEYS, "occ", "dbid", "commit_time", "origin", "landed_at")
    recs = (_occurrence(_rows(seq, "records"), "rsnr")
            .select(*KEYS, "occ", "rsnr", "fnr", "isn", F.col("type").alias("record_type"),
                    "rsp", "record_time")
            .join(txs, [*KEYS, "occ"])
            .where(_file_filter(list(settings.layouts)))
            # versioning.change_time: an initial-state record is as new as its read (URBRTIME)
            .withColumn("commit_time", F.when(
                (F.col("record_type") == "R") & F.col("record_time").isNotNull(),
                F.col("record_time")).otherwise(F.col("commit_time")))
            .drop("record_time"))
    imgs = (_occurrence(_rows(seq, "images"), "rsnr", "dsnr")
            .select(*KEYS, "occ", "rsnr", "dsnr", "image_type", "payload", "acode", "wcode",
                    "arc")
            .where(F.col("image_type").isin(*TYPED_IMAGE_TYPES))
            .join(recs, [*KEYS, "occ", "rsnr"]))
    return recs, imgs


# ------------------------------------------------------------------------- writes
def _append(frame: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    (frame.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", batch_id).save(path))


def _quarantine_rows(bad: DataFrame, lay: Layout, batch_id: int) -> DataFrame:
    from pyspark.sql import functions as F

    details = F.to_json(F.struct("fnr", "isn", "rsnr", "dsnr", "record_type", "image_type"))
    cols = {
        "source": F.lit("payload"), "subscription": F.col("subscription"),
        "destination": F.col("destination"), "epoch": F.col("epoch"), "tsnr": F.col("tsnr"),
        "reason": F.concat(F.lit(f"layout {lay.subscription}/{lay.dbid}/{lay.fnr}: "),
                           F.col(ERROR_COLUMN)),
        "topic": F.lit(None), "partition": F.lit(None), "offset": F.lit(None),
        "elem_index": F.col("rsnr"), "eye": F.lit("URBD"), "raw": F.col("payload"),
        "fields_json": details, "quarantined_at": F.col("landed_at")}
    names = [c.strip().split(" ") for c in SCHEMAS["quarantine"].split(",")]
    return bad.select(*[cols[n].cast(t).alias(n) for n, t in names],
                      F.lit(batch_id).cast("bigint").alias("batch_id"))


def _order(alias: str = "", verified: str | None = None) -> str:
    """The order key of ``pipeline.typed.versioning.order_key`` as a comparable struct."""
    pre = f"{alias}." if alias else ""
    fields = [f"'{c}', {pre}{c}" for c in ORDER[:-1]]
    fields.append(f"'verified', {verified or pre + 'verified'}")
    return f"named_struct({', '.join(fields)})"


def _newer(left: str, right: str, right_verified: str | None = None) -> str:
    return f"{_order(left)} > {_order(right, right_verified)}"


def _one_image_per_type(changes: DataFrame) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    last = Window.partitionBy(*KEYS, "occ", "rsnr", "image_type").orderBy(F.col("dsnr").desc())
    return changes.withColumn("_n", F.row_number().over(last)).where("_n = 1")


def record_changes(recs: DataFrame, changes: DataFrame, values: list[str]) -> DataFrame:
    """One change per record of the file: its action and the values of its own image.

    Upserts take the after image, deletes and unverifies the before image (null without a
    decodable one), so a row depends on its change alone (``pipeline.typed.versioning``).
    """
    from pyspark.sql import functions as F

    images = _one_image_per_type(changes)
    image = F.struct(*[F.col(f"`{v}`") for v in values])
    on = [*KEYS, "occ", "rsnr"]
    after = images.where(F.col("image_type") == "A").select(*on, image.alias("_after"))
    before = images.where(F.col("image_type") == "B").select(*on, image.alias("_before"))
    rows = recs.join(after, on, "left").join(before, on, "left")
    # An initial-state record with response 113 says the ISN no longer exists: a delete.
    gone = (F.col("record_type") == "R") & (F.col("rsp") == RSP_ISN_NOT_FOUND)
    action = (F.when((F.col("record_type") == "D") | gone, "delete")
              .when(F.col("_after").isNotNull(), "upsert").otherwise("unverify"))
    rows = rows.withColumn("action", action).withColumn(
        "_image", F.when(F.col("action") == "upsert", F.col("_after")).otherwise(F.col("_before")))
    return rows.select("isn", *[F.col(f"_image.`{v}`").alias(v) for v in values], "action",
                       (F.col("action") != "unverify").alias("verified"), *META)


def merge_source(changes: DataFrame) -> DataFrame:
    """One change per ISN, the newest by order key: MERGE takes one source row per target."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = Window.partitionBy("isn").orderBy(*[F.col(c).desc() for c in ORDER])
    return changes.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")


def unburied(spark: SparkSession, source: DataFrame, current_path: str,
             tombstones_path: str) -> DataFrame:
    """The changes that may still land with ``deletes: remove``.

    Kept: newer than the ISN's tombstone (so a late older change never resurrects a removed
    row) and not older than its current row. Why "not older" rather than "newer": the current
    MERGE only moves a row to exactly its source change's version or removes it, so this set is
    the same before and after that MERGE — the tombstone MERGE, and a replay after a crash
    between the two, see the same changes.
    """
    from pyspark.sql import functions as F

    tomb = (spark.read.format("delta").load(tombstones_path)
            .select(F.col("isn").alias("_isn"), F.expr(_order(verified="true")).alias("_tomb")))
    cur = (spark.read.format("delta").load(current_path)
           .select(F.col("isn").alias("_isn"), F.expr(_order()).alias("_cur")))
    key = F.expr(_order())
    return (source.join(tomb, F.col("isn") == F.col("_isn"), "left").drop("_isn")
            .join(cur, F.col("isn") == F.col("_isn"), "left").drop("_isn")
            .where((F.col("_tomb").isNull() | (key > F.col("_tomb")))
                   & (F.col("_cur").isNull() | (key >= F.col("_cur"))))
            .drop("_tomb", "_cur"))


def file_cutoffs(spark: SparkSession, settings: Settings,
                 ) -> dict[tuple[int, int], tuple[int, ...]]:
    """(dbid, fnr) → the file's refresh/define cutoffs (µs since the epoch, ascending).

    Every distinct ``truncated_before`` of the file's ``file_status`` rows: the latest one
    guards the current table, all of them close history intervals. A small table, read once
    per batch.
    """
    from pyspark.sql import functions as F

    rows = (spark.read.format("delta").load(table_path(settings, "file_status"))
            .where(F.col("truncated_before").isNotNull())
            .groupBy("dbid", "fnr")
            .agg(F.array_sort(F.collect_set(F.unix_micros("truncated_before"))).alias("cuts"))
            .collect())
    return {(r.dbid, r.fnr): tuple(r.cuts) for r in rows}


def since_cutoff(changes: DataFrame, cutoffs_us: tuple[int, ...]) -> DataFrame:
    """The changes a refresh leaves to the current table: committed at or after the latest
    cutoff (``pipeline.typed.versioning.since_cutoff``; µs, as the truncate compares)."""
    if not cutoffs_us:
        return changes
    return changes.where(f"commit_time >= timestamp_micros({int(cutoffs_us[-1])})")


def _closed_at(cutoffs_us: tuple[int, ...]) -> Column:
    """``valid_to``: the next version's commit time or the first cutoff after the version's
    own, whichever is earlier (``pipeline.typed.history.closed_at``); least() skips nulls."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    following = F.lead("commit_time").over(Window.partitionBy("isn").orderBy(*VERSION))
    if not cutoffs_us:
        return following
    cap: Column | None = None
    for cut in sorted(cutoffs_us):
        stamp = F.timestamp_micros(F.lit(int(cut)))
        before = F.col("commit_time") < stamp
        cap = F.when(before, stamp) if cap is None else cap.when(before, stamp)
    return F.least(following, cap)


def _execute_once(spark: SparkSession, merge: DeltaMergeBuilder, app_id: str,
                  batch_id: int) -> None:
    """Run a MERGE idempotently: Delta skips it if (app_id, batch_id) already committed."""
    spark.conf.set(_TXN_APP, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        merge.execute()
    finally:
        spark.conf.unset(_TXN_APP)
        spark.conf.unset(_TXN_VERSION)


def merge_current(spark: SparkSession, source: DataFrame, path: str, values: list[str],
                  deletes: str, app_id: str, batch_id: int) -> None:
    """The version-guarded MERGE (``pipeline.typed.versioning`` is its reference model)."""
    from delta.tables import DeltaTable

    row = {**{c: f"s.{c}" for c in META}, **{c: f"s.`{c}`" for c in values},
           "deleted": "s.action = 'delete'", "verified": "s.verified",
           "batch_id": str(int(batch_id))}
    newer = _newer("s", "t")
    merge = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.isn = s.isn")
    if deletes == "remove":
        merge = merge.whenMatchedDelete(f"s.action = 'delete' AND {newer}")
    merge = (merge.whenMatchedUpdate(newer, set=row)
             .whenNotMatchedInsert(None if deletes == "mark" else "s.action != 'delete'",
                                   values={"isn": "s.isn", **row}))
    _execute_once(spark, merge, app_id, batch_id)


def merge_tombstones(spark: SparkSession, source: DataFrame, path: str, app_id: str,
                     batch_id: int, horizon_us: int | None) -> None:
    """Keep each removed ISN's delete version; drop it when a newer change revives the ISN.

    ``source`` is ``unburied``'s. Tombstones the batch does not touch and committed before
    ``horizon_us`` (µs since the epoch) are purged: the retention.
    """
    from delta.tables import DeltaTable

    row = {"isn": "s.isn", **{c: f"s.{c}" for c in META}, "batch_id": str(int(batch_id))}
    newer = _newer("s", "t", right_verified="true")
    merge = (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.isn = s.isn")
             .whenMatchedDelete(f"s.action != 'delete' AND {newer}")
             .whenMatchedUpdate(f"s.action = 'delete' AND {newer}", set=row)
             .whenNotMatchedInsert("s.action = 'delete'", values=row))
    if horizon_us is not None:
        merge = merge.whenNotMatchedBySourceDelete(f"unix_micros(t.commit_time) < {horizon_us}")
    _execute_once(spark, merge, app_id, batch_id)


def history_source(spark: SparkSession, changes: DataFrame, path: str, values: list[str],
                   batch_id: int, cutoffs_us: tuple[int, ...] = ()) -> DataFrame:
    """Every version of the ISNs the batch touches, with its interval (``pipeline.typed.history``).

    The ISNs' existing history rows and the batch's changes, one row per version (the copy
    with the greatest order key; an existing row wins a tie, so a duplicate rewrites nothing),
    then valid_to from the next version or the file's refresh cutoffs (``_closed_at``), and
    is_current while it is open. Rows of the batch carry ``_new = 1``.
    Replays after a crash are skipped by the MERGE's txn id, so reading the table it writes is
    safe.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = ["isn", *values, *META, "deleted", "verified", "batch_id"]
    new = (changes.withColumn("deleted", F.col("action") == "delete")
           .withColumn("batch_id", F.lit(batch_id).cast("bigint"))
           .select(*[F.col(f"`{c}`") for c in cols], F.lit(1).alias("_new")))
    old = (spark.read.format("delta").load(path)
           .join(new.select("isn").distinct(), "isn", "left_semi")
           .select(*[F.col(f"`{c}`") for c in cols], F.lit(0).alias("_new")))
    copies = Window.partitionBy("isn", *VERSION).orderBy(
        F.col("destination").desc(), F.col("verified").desc(), F.col("_new").asc())
    return (old.unionByName(new)
            .withColumn("_n", F.row_number().over(copies)).where("_n = 1").drop("_n")
            .withColumn("valid_from", F.col("commit_time"))
            .withColumn("valid_to", _closed_at(cutoffs_us))
            .withColumn("is_current", F.col("valid_to").isNull()))


def merge_history(spark: SparkSession, source: DataFrame, path: str, values: list[str],
                  app_id: str, batch_id: int) -> None:
    """Insert new versions; update rows whose interval or winning copy changed."""
    from delta.tables import DeltaTable

    same_version = " AND ".join(["t.isn = s.isn", *[f"t.{c} <=> s.{c}" for c in VERSION]])
    row = {c: f"s.`{c}`" for c in ["isn", *values, *META, "deleted", "verified", "batch_id",
                                   "valid_from", "valid_to", "is_current"]}
    changed = "s._new = 1 OR NOT (t.valid_to <=> s.valid_to) OR t.is_current != s.is_current"
    merge = (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), same_version)
             .whenMatchedUpdate(changed, set=row)
             .whenNotMatchedInsert(values=row))
    _execute_once(spark, merge, app_id, batch_id)


def write_typed_tables(spark: SparkSession, batch: DataFrame, batch_id: int, settings: Settings,
                       app_id: str) -> dict[str, int]:
    """Land the typed tables of every configured layout for one batch; rows per table."""
    if not settings.layouts:
        return {}
    from pyspark.sql import functions as F

    ensure_typed_tables(spark, settings)
    recs, imgs = joined_rows(batch, settings)
    recs = recs.persist()
    counts: dict[str, int] = {}
    try:
        # the files present, with their newest commit time: the tombstones' retention horizon
        newest = {(r["subscription"], r["dbid"], r["fnr"]): r["newest_us"] for r in (
            recs.groupBy("subscription", "dbid", "fnr")
            .agg(F.max(F.unix_micros("commit_time")).alias("newest_us")).collect())}
        present = {f"{sub.lower()}_{fnr}" for sub, _, fnr in newest}
        specs, events, fresh = _specs(spark, settings, batch, batch_id, present)
        if fresh:  # new GFFT versions may read what AUTI said a field became
            from pipeline.spark.typed.reconcile import versions_arrived

            events += versions_arrived(spark, settings, specs, fresh, app_id, batch_id,
                                       len(events))
        cutoffs = file_cutoffs(spark, settings) if newest else {}
        for lay in settings.layouts:
            key = (lay.subscription, lay.dbid, lay.fnr)
            if key not in newest:
                continue
            horizon = (None if newest[key] is None or lay.tombstone_retention_days is None
                       else newest[key] - int(lay.tombstone_retention_days * _DAY_US))
            counts.update(_write_file(spark, lay, settings, specs[lay.table_suffix()], recs,
                                      imgs, batch_id, app_id, horizon,
                                      cutoffs.get((lay.dbid, lay.fnr), ())))
        if events:
            append_rows(spark, events, "schema_events", settings, f"{app_id}-gfft", batch_id)
            counts["schema_events_gfft"] = len(events)
    finally:
        recs.unpersist()
    if counts:
        log.info("typed batch %s: %s", batch_id, counts)
    return counts


def _specs(spark: SparkSession, settings: Settings, batch: DataFrame, batch_id: int,
           present: set[str]) -> tuple[dict[str, DecodeSpec | VersionedSpec],
                                       list[dict[str, Any]], dict[tuple[int, int], Any]]:
    """Each file's decode spec (by table suffix): its GFFT versions with the conf as fallback
    (``pipeline.spark.typed.stream_layouts``), or the conf layout alone; the ``schema_events``
    rows of the GFFT versions first seen in this batch; and the files those versions are of,
    with the newest one's creation time. ``present``: the suffixes of the files the batch has
    records of."""
    versions = read_versions(spark, settings, batch, batch_id, bool(present))
    specs: dict[str, DecodeSpec | VersionedSpec] = {}
    events: list[dict[str, Any]] = []
    fresh: dict[tuple[int, int], Any] = {}
    for lay in settings.layouts:
        suffix = lay.table_suffix()
        fv = versions.get(suffix)
        if fv is None or (not fv.layouts.versions and lay.format_buffer):
            specs[suffix] = (_conf_spec(spark, settings, lay, suffix in present)
                             if lay.format_buffer else
                             VersionedSpec(FileLayouts(None), {}, **_form(settings, lay),
                                           tod_offset_us=settings.replicator.tod_offset_us))
            continue
        spec, rows = prepare_file(spark, settings, lay, fv, value_tables(lay),
                                  _form(settings, lay))
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
    return VersionedSpec(FileLayouts(spec.layout), {**types, **wider}, **_form(settings, lay),
                         tod_offset_us=settings.replicator.tod_offset_us)


def _write_file(spark: SparkSession, lay: Layout, settings: Settings,
                spec: DecodeSpec | VersionedSpec, recs: DataFrame, imgs: DataFrame,
                batch_id: int, app_id: str, horizon_us: int | None,
                cutoffs_us: tuple[int, ...]) -> dict[str, int]:
    """One file's batch: decode and append its images, then MERGE its records.

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
        n_changes, n_bad = changes.count(), bad.count()
        name = changes_table(lay)
        if n_changes:
            _append(changes, table_path(settings, name), f"{app_id}-{name}", batch_id)
        if n_bad:
            _append(_quarantine_rows(bad, lay, batch_id), table_path(settings, "quarantine"),
                    f"{app_id}-quarantine-{name}", batch_id)
        file_recs = recs.where(mine)
        if values:  # a file with no layout yet has no value columns to MERGE
            _merge_file(spark, lay, settings, record_changes(file_recs, good, values), values,
                        batch_id, app_id, horizon_us, cutoffs_us)
        return {name: n_changes, current_table(lay): file_recs.count(),
                f"quarantine_{name}": n_bad}
    finally:
        decoded.unpersist()


def _merge_file(spark: SparkSession, lay: Layout, settings: Settings, rows: DataFrame,
                values: list[str], batch_id: int, app_id: str, horizon_us: int | None,
                cutoffs_us: tuple[int, ...]) -> None:
    """The current table (with its tombstones) and the history, each MERGE exactly once.

    Changes older than the file's latest refresh cutoff never reach the current table or the
    tombstones; the history takes them as closed intervals (module doc, point 5).
    """
    cur, tomb, hist = current_table(lay), tombstones_table(lay), history_table(lay)
    source = merge_source(since_cutoff(rows, cutoffs_us))
    if lay.deletes == "remove":
        source = unburied(spark, source, table_path(settings, cur), table_path(settings, tomb))
    merge_current(spark, source, table_path(settings, cur), values, lay.deletes,
                  f"{app_id}-{cur}", batch_id)
    if lay.deletes == "remove":
        merge_tombstones(spark, source, table_path(settings, tomb), f"{app_id}-{tomb}",
                         batch_id, horizon_us)
    if lay.history:
        path = table_path(settings, hist)
        merge_history(spark, history_source(spark, rows, path, values, batch_id, cutoffs_us),
                      path, values, f"{app_id}-{hist}", batch_id)
