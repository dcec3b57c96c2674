"""Typed stage, decode side: the batch's records and images of the configured files, the
rows an undecodable image is quarantined with, and the change each record makes.

Points 1 to 3 of ``pipeline.spark.typed.stage``: transactions ⋈ records ⋈ images of the batch
(the n-th tsnr-0 pseudo-transaction of a key, in batch order ``_seq``: its records from an rsnr
that does not follow the one before, its images by its records' URBRDCNT in order — the rule of
``pipeline.typed.batch_rows``), and one change per record (``pipeline.typed.versioning``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.config import Layout, Settings
from pipeline.spark.land.tables import BLOB_COLUMN, SCHEMAS, TS_FORMAT, json_schema
from pipeline.spark.typed.stream_layouts import file_filter
from pipeline.spark.typed.tables import META
from pipeline.typed.decoding import ERROR_COLUMN, TYPED_IMAGE_TYPES
from pipeline.typed.versioning import RSP_ISN_NOT_FOUND

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEYS = ("subscription", "destination", "epoch", "tsnr")


def _rows(batch: DataFrame, table: str) -> DataFrame:
    """Like ``pipeline.spark.land.tables.table_frame``, keeping the row's position ``_seq`` in
    the batch."""
    from pyspark.sql import functions as F

    names = [c.strip().split(" ")[0] for c in json_schema(table).split(",")]
    parsed = (batch.where(F.col("table") == table)
              .select(F.from_json("json", json_schema(table),
                                  {"timestampFormat": TS_FORMAT}).alias("r"), "blob", "_seq"))
    cols = [F.col(f"r.{n}") for n in names]
    if table in BLOB_COLUMN:
        cols.append(F.col("blob").alias(BLOB_COLUMN[table]))
    return parsed.select(*cols, "_seq")


def _occurrence(frame: DataFrame) -> DataFrame:
    """Transactions: number repeated keys (tsnr 0) in batch order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*KEYS).orderBy("_seq")
    return frame.withColumn("occ", F.row_number().over(window)).drop("_seq")


def _record_occurrence(frame: DataFrame) -> DataFrame:
    """Records: a new pseudo-transaction at each rsnr that does not follow the one before
    (``occ``), and where each record's images end in its key's images (``_img_end``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy(*KEYS).orderBy("_seq")
    running = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = F.lag("rsnr").over(ordered)
    new = (before.isNull() | (F.col("rsnr") <= before)).cast("int")
    return (frame.withColumn("_new", new)
            .withColumn("occ", F.sum("_new").over(running))
            .withColumn("_img_end", F.sum(F.coalesce("dcnt", F.lit(0))).over(running))
            .drop("_new", "_seq"))


def _image_occurrence(images: DataFrame, records: DataFrame) -> DataFrame:
    """Images: a live one is its transaction's (occ 1); the n-th tsnr-0 image of a key is the
    one its records' URBRDCNT place n-th, and one whose rsnr is not that record's joins none
    (never another record's ISN)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    initial = F.col("tsnr") == 0
    place = (records.where(initial & (F.col("dcnt") > 0))
             .select(*KEYS, "rsnr", "occ", F.explode(F.sequence(
                 F.col("_img_end") - F.col("dcnt") + 1, F.col("_img_end"))).alias("_img")))
    ordered = Window.partitionBy(*KEYS).orderBy("_seq")
    placed = (images.where(initial).withColumn("_img", F.row_number().over(ordered))
              .drop("_seq").join(place, [*KEYS, "rsnr", "_img"]).drop("_img"))
    live = images.where(~initial).drop("_seq").withColumn("occ", F.lit(1))
    return live.unionByName(placed.select(*live.columns))


def joined_rows(batch: DataFrame, settings: Settings) -> tuple[DataFrame, DataFrame]:
    """(records, images) of the configured files, each with its transaction's columns.

    Images: the after and before images only (``TYPED_IMAGE_TYPES``); K images (the key
    before the image) are not records and stay in the raw ``images`` table.
    """
    from pyspark.sql import functions as F

    seq = batch.withColumn("_seq", F.monotonically_increasing_id())
    return _joined({t: _rows(seq, t) for t in ("transactions", "records", "images")}, settings)


def joined_rows_from_files(spark: SparkSession, settings: Settings,
                           inputs: Mapping[str, Sequence[str]]) -> tuple[DataFrame, DataFrame]:
    """``joined_rows`` of a batch whose rows are in the direct writer's Parquet files (each
    call's rows in the order it emitted them: ``_seq`` counts them file by file)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    frames = {}
    for table in ("transactions", "records", "images"):
        names = [c.strip().split(" ")[0] for c in SCHEMAS[table].split(",")]
        paths = list(inputs.get(table, ()))
        frame = (spark.read.parquet(*paths) if paths else spark.createDataFrame(
            [], StructType.fromDDL(SCHEMAS[table])))
        frames[table] = frame.select(*names).withColumn("_seq", F.monotonically_increasing_id())
    return _joined(frames, settings)


def _joined(frames: Mapping[str, DataFrame], settings: Settings) -> tuple[DataFrame, DataFrame]:
    from pyspark.sql import functions as F

    txs = _occurrence(frames["transactions"]).select(
        *KEYS, "occ", "dbid", "commit_time", "origin", "landed_at")
    numbered = _record_occurrence(frames["records"])
    recs = (numbered
            .select(*KEYS, "occ", "rsnr", "fnr", "isn", F.col("type").alias("record_type"),
                    "rsp", "record_time")
            .join(txs, [*KEYS, "occ"])
            .where(file_filter(list(settings.layouts)))
            # versioning.change_time: an initial-state record is as new as its read (URBRTIME)
            .withColumn("commit_time", F.when(
                (F.col("record_type") == "R") & F.col("record_time").isNotNull(),
                F.col("record_time")).otherwise(F.col("commit_time")))
            .drop("record_time"))
    imgs = (_image_occurrence(frames["images"], numbered)
            .select(*KEYS, "occ", "rsnr", "dsnr", "image_type", "payload", "acode", "wcode",
                    "arc")
            .where(F.col("image_type").isin(*TYPED_IMAGE_TYPES))
            .join(recs, [*KEYS, "occ", "rsnr"]))
    return recs, imgs


def quarantine_rows(bad: DataFrame, lay: Layout, batch_id: int) -> DataFrame:
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
