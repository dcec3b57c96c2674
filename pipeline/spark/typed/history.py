"""Typed stage, history side: every version of the ISNs a batch touches, with its interval,
MERGEd into ``history_<sub>_<fnr>`` (SCD type 2; ``pipeline.typed.history`` is the reference
model). Point 4 of ``pipeline.spark.typed.stage``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.spark.land.writes import merge_once
from pipeline.spark.typed.tables import META, VERSION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


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
                  app_id: str, batch_id: int) -> int:
    """Insert new versions; update rows whose interval or winning copy changed. Returns the
    rows it copied unchanged (``merge_once``)."""
    from delta.tables import DeltaTable

    same_version = " AND ".join(["t.isn = s.isn", *[f"t.{c} <=> s.{c}" for c in VERSION]])
    row = {c: f"s.`{c}`" for c in ["isn", *values, *META, "deleted", "verified", "batch_id",
                                   "valid_from", "valid_to", "is_current"]}
    changed = "s._new = 1 OR NOT (t.valid_to <=> s.valid_to) OR t.is_current != s.is_current"
    merge = (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), same_version)
             .whenMatchedUpdate(changed, set=row)
             .whenNotMatchedInsert(values=row))
    return merge_once(spark, merge, path, app_id, batch_id)
