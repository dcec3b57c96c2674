"""Typed tables per configured file: ``changes_<sub>_<fnr>`` and ``current_<sub>_<fnr>``.

Runs inside foreachBatch after the raw tables are committed, from the same persisted batch:

1. transactions ⋈ records ⋈ images of the batch. Initial-state pseudo-transactions all have
   tsnr 0 and restart rsnr at 1, so (destination, subscription, epoch, tsnr, rsnr) is not unique
   in a batch; the n-th tsnr-0 transaction of a key is matched with the n-th occurrence of each
   rsnr/dsnr, in the order the state function emitted them (``_seq``: the batch is persisted,
   so ``monotonically_increasing_id`` numbers its rows the same way on every read).
2. Images of each configured file are decoded by ``pipeline.typed.decode_rows`` (mapInPandas,
   one PayloadDecoder per form per partition). Good rows append to the change table; images
   that do not match the layout append to ``quarantine`` (source ``payload``).
3. The file's records become one change per ISN (newest version, see
   ``pipeline.typed.versioning``), MERGEd into the current table under a version guard.

Exactly once: appends carry txnAppId/txnVersion; the MERGE reads them from the session conf
(``spark.databricks.delta.write.txnAppId``/``txnVersion``), set just before and unset right
after, never concurrently with another writer of this session.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline.config import Layout, Settings
from pipeline.payload import layout_from_conf, spark_ddl
from pipeline.spark.sinks import _TS_FORMAT
from pipeline.spark.tables import BLOB_COLUMN, SCHEMAS, json_schema, table_path
from pipeline.typed.decoding import ERROR_COLUMN, DecodeSpec, decode_rows

if TYPE_CHECKING:
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
_NEWER = ("struct(s.commit_time, s.epoch, s.tsnr, s.rsnr) > "
          "struct(t.commit_time, t.epoch, t.tsnr, t.rsnr)")
_created: set[str] = set()


def decode_spec(settings: Settings, lay: Layout) -> DecodeSpec:
    sub = next(s for s in settings.subscriptions if s.name == lay.subscription)
    return DecodeSpec(layout_from_conf(lay.layout_conf()), ebcdic=sub.ebcdic,
                      codepage=lay.codepage or settings.replicator.codepage, empty=lay.empty)


def changes_table(lay: Layout) -> str:
    return f"changes_{lay.table_suffix()}"


def current_table(lay: Layout) -> str:
    return f"current_{lay.table_suffix()}"


def change_ddl(lay: Layout) -> str:
    return f"{CHANGE_KEYS_DDL}, {spark_ddl(layout_from_conf(lay.layout_conf()))}, batch_id bigint"


def current_ddl(lay: Layout) -> str:
    values = spark_ddl(layout_from_conf(lay.layout_conf()))
    return f"isn bigint, {values}, {CURRENT_META_DDL}, batch_id bigint"


def ensure_typed_tables(spark: SparkSession, settings: Settings) -> None:
    """Create each layout's tables (empty) once per process, so analysts can query early."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    for lay in settings.layouts:
        for name, ddl in ((changes_table(lay), change_ddl(lay)),
                          (current_table(lay), current_ddl(lay))):
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


def _file_filter(layouts: list[Layout]) -> Column:
    from pyspark.sql import functions as F

    cond = F.lit(False)
    for lay in layouts:
        cond = cond | ((F.col("subscription") == lay.subscription)
                       & (F.col("dbid") == lay.dbid) & (F.col("fnr") == lay.fnr))
    return cond


def joined_rows(batch: DataFrame, settings: Settings) -> tuple[DataFrame, DataFrame]:
    """(records, images) of the configured files, each with its transaction's columns."""
    from pyspark.sql import functions as F

    seq = batch.withColumn("_seq", F.monotonically_increasing_id())
    txs = _occurrence(_rows(seq, "transactions")).select(
        *KEYS, "occ", "dbid", "commit_time", "origin", "landed_at")
    recs = (_occurrence(_rows(seq, "records"), "rsnr")
            .select(*KEYS, "occ", "rsnr", "fnr", "isn", F.col("type").alias("record_type"))
            .join(txs, [*KEYS, "occ"])
            .where(_file_filter(list(settings.layouts))))
    imgs = (_occurrence(_rows(seq, "images"), "rsnr", "dsnr")
            .select(*KEYS, "occ", "rsnr", "dsnr", "image_type", "payload", "acode", "wcode",
                    "arc")
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


def merge_source(recs: DataFrame, changes: DataFrame, values: list[str]) -> DataFrame:
    """One change per ISN: the newest record's action, with the after image's values."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    after = (changes.where(F.col("image_type") == "A")
             .select(*KEYS, "occ", "rsnr", *values, F.lit(True).alias("_has_after")))
    rows = recs.join(after, [*KEYS, "occ", "rsnr"], "left")
    action = (F.when(F.col("record_type") == "D", "delete")
              .when(F.col("_has_after").isNotNull(), "upsert").otherwise("unverify"))
    newest = Window.partitionBy("isn").orderBy(*[F.col(c).desc() for c in (
        "commit_time", "epoch", "tsnr", "rsnr", "destination")])
    return (rows.withColumn("action", action)
            .withColumn("_n", F.row_number().over(newest)).where("_n = 1")
            .select("isn", *values, "action", "subscription", "destination", "epoch", "tsnr",
                    "rsnr", "commit_time", "record_type", "origin"))


def merge_current(spark: SparkSession, source: DataFrame, path: str, values: list[str],
                  deletes: str, app_id: str, batch_id: int) -> None:
    """The version-guarded MERGE (``pipeline.typed.versioning`` is its reference model)."""
    from delta.tables import DeltaTable

    meta = ["subscription", "destination", "epoch", "tsnr", "rsnr", "commit_time",
            "record_type", "origin"]
    stamp = {c: f"s.{c}" for c in meta} | {"batch_id": str(int(batch_id))}
    merge = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.isn = s.isn")
    if deletes == "remove":
        merge = merge.whenMatchedDelete(f"s.action = 'delete' AND {_NEWER}")
    merge = (merge
             .whenMatchedUpdate(f"s.action = 'delete' AND {_NEWER}",
                                set={**stamp, "deleted": "true", "verified": "true"})
             .whenMatchedUpdate(f"s.action = 'unverify' AND {_NEWER}",
                                set={**stamp, "deleted": "false", "verified": "false"})
             .whenMatchedUpdate(f"s.action = 'upsert' AND {_NEWER}",
                                set={**stamp, **{c: f"s.`{c}`" for c in values},
                                     "deleted": "false", "verified": "true"}))
    insert = {"isn": "s.isn", **stamp, **{c: f"s.`{c}`" for c in values},
              "deleted": "s.action = 'delete'", "verified": "s.action != 'unverify'"}
    merge = merge.whenNotMatchedInsert(
        None if deletes == "mark" else "s.action != 'delete'", values=insert)
    spark.conf.set(_TXN_APP, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        merge.execute()
    finally:
        spark.conf.unset(_TXN_APP)
        spark.conf.unset(_TXN_VERSION)


def write_typed_tables(spark: SparkSession, batch: DataFrame, batch_id: int, settings: Settings,
                       app_id: str) -> dict[str, int]:
    """Land the typed tables of every configured layout for one batch; rows per table."""
    if not settings.layouts:
        return {}
    ensure_typed_tables(spark, settings)
    recs, imgs = joined_rows(batch, settings)
    recs = recs.persist()
    counts: dict[str, int] = {}
    try:
        present = {(r["subscription"], r["dbid"], r["fnr"])
                   for r in recs.select("subscription", "dbid", "fnr").distinct().collect()}
        for lay in settings.layouts:
            if (lay.subscription, lay.dbid, lay.fnr) not in present:
                continue
            counts.update(_write_file(spark, lay, settings, recs, imgs, batch_id, app_id))
    finally:
        recs.unpersist()
    if counts:
        log.info("typed batch %s: %s", batch_id, counts)
    return counts


def _write_file(spark: SparkSession, lay: Layout, settings: Settings, recs: DataFrame,
                imgs: DataFrame, batch_id: int, app_id: str) -> dict[str, int]:
    from pyspark.sql import functions as F

    spec = decode_spec(settings, lay)
    values = spec.columns
    mine = ((F.col("subscription") == lay.subscription) & (F.col("dbid") == lay.dbid)
            & (F.col("fnr") == lay.fnr))
    file_imgs = imgs.where(mine)
    schema = f"{', '.join(f'`{f.name}` {f.dataType.simpleString()}' for f in file_imgs.schema)}"
    out_ddl = f"{schema}, {spark_ddl(spec.layout)}, {ERROR_COLUMN} string"
    decoded = file_imgs.mapInPandas(lambda it: decode_rows(it, spec), out_ddl).persist()
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
        source = merge_source(recs.where(mine), good, values)
        cur = current_table(lay)
        merge_current(spark, source, table_path(settings, cur), values, lay.deletes,
                      f"{app_id}-{cur}", batch_id)
        return {name: n_changes, cur: recs.where(mine).count(), f"quarantine_{name}": n_bad}
    finally:
        decoded.unpersist()
