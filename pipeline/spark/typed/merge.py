"""Typed stage, MERGE side: the current table (version-guarded) and its tombstones.

Points 3 and 5 of ``pipeline.spark.typed.stage``: one change per ISN, the tombstones a removed
ISN leaves (``deletes: remove``), and the refresh cutoffs that keep older changes out. Each
MERGE runs exactly once per batch (``pipeline.spark.land.writes.delta_txn``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.spark.land.tables import small_table
from pipeline.spark.land.writes import delta_txn, merge_once
from pipeline.spark.typed.tables import META, ORDER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _order(alias: str = "", verified: str | None = None) -> str:
    """The order key of ``pipeline.typed.versioning.order_key`` as a comparable struct."""
    pre = f"{alias}." if alias else ""
    fields = [f"'{c}', {pre}{c}" for c in ORDER[:-1]]
    fields.append(f"'verified', {verified or pre + 'verified'}")
    return f"named_struct({', '.join(fields)})"


def _newer(left: str, right: str, right_verified: str | None = None) -> str:
    return f"{_order(left)} > {_order(right, right_verified)}"


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
    per batch (``small_table``).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = small_table(spark, settings, "file_status", ["dbid", "fnr", "truncated_before"])
    stamps = pc.cast(rows.column("truncated_before"), pa.int64()).to_pylist()
    cuts: dict[tuple[int, int], set[int]] = {}
    for dbid, fnr, stamp in zip(rows.column("dbid").to_pylist(), rows.column("fnr").to_pylist(),
                                stamps, strict=True):
        if stamp is not None:
            cuts.setdefault((dbid, fnr), set()).add(stamp)
    return {key: tuple(sorted(found)) for key, found in cuts.items()}


def since_cutoff(changes: DataFrame, cutoffs_us: tuple[int, ...]) -> DataFrame:
    """The changes a refresh leaves to the current table: committed at or after the latest
    cutoff (``pipeline.typed.versioning.since_cutoff``; µs, as the truncate compares)."""
    if not cutoffs_us:
        return changes
    return changes.where(f"commit_time >= timestamp_micros({int(cutoffs_us[-1])})")


def merge_current(spark: SparkSession, source: DataFrame, path: str, values: list[str],
                  deletes: str, app_id: str, batch_id: int) -> int:
    """The version-guarded MERGE (``pipeline.typed.versioning`` is its reference model);
    the rows it copied unchanged (``merge_once``)."""
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
    return merge_once(spark, merge, path, app_id, batch_id)


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
    with delta_txn(spark, app_id, batch_id):
        merge.execute()
