"""Exactly-once writes to Delta, shared by every landing step.

Three ways a batch's write is made idempotent:

* :func:`write_once` (the raw tables' appends): skipped when the table's log shows the batch
  landed (``pipeline.spark.land.ledger``); tagged so a replay can tell; Delta's
  txnAppId/txnVersion only when the log cannot tell;
* :func:`append_once` and :func:`append_rows` (the typed and lifecycle appends): Delta's
  txnAppId/txnVersion, one app id per table and writer of the batch;
* :func:`delta_txn` (MERGE, DELETE, UPDATE): Delta DML reads the same pair from the session
  conf, set just before the statement and unset right after, never concurrently with another
  writer of the session.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.spark.land.ledger import CommitLedger, commit_actions, commit_text
from pipeline.spark.land.tables import SCHEMAS, table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("urbpipe.sink")
TXN_APP = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def write_once(frame: DataFrame, path: str, app_id: str, batch_id: int,
               ledger: CommitLedger) -> None:
    """Append once: skipped if the table's log shows this batch landed (``ledger``), else
    tagged so a replay can tell; txnAppId/txnVersion only when the log cannot tell."""
    landed = ledger.landed(path, batch_id)
    if landed:
        log.info("batch %s already in %s: skipped", batch_id, path)
        return
    writer = (frame.write.format("delta").mode("append")
              .option("userMetadata", ledger.tag(batch_id)))
    if landed is None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
    writer.save(path)


def append_once(frame: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    """Append ``frame`` once per (``app_id``, batch): Delta skips a repeat."""
    (frame.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", batch_id).save(path))


def append_rows(spark: SparkSession, rows: list[dict[str, Any]], table: str,
                settings: Settings, app_id: str, batch_id: int | None, *,
                txn_version: int | None = None) -> None:
    """Append rows to a raw table once per (``app_id``-``table``, batch): each writer of a
    table in a batch needs its own ``app_id``, or Delta skips the second append. Outside a
    batch (at start: ``batch_id`` None) ``txn_version`` numbers the writes of ``app_id``."""
    from pyspark.sql.types import StructType

    if not rows:
        return
    schema = StructType.fromDDL(f"{SCHEMAS[table]}, batch_id bigint")
    data = [tuple({**r, "batch_id": batch_id}[f.name] for f in schema.fields) for r in rows]
    version = batch_id if txn_version is None else txn_version
    append_once(spark.createDataFrame(data, schema), table_path(settings, table),
                f"{app_id}-{table}", version)


@contextmanager
def delta_txn(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Delta DML (MERGE, DELETE, UPDATE) reads its idempotency pair from the session conf:
    set for the block, unset right after."""
    spark.conf.set(TXN_APP, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP)
        spark.conf.unset(TXN_VERSION)


def merge_once(spark: SparkSession, merge: Any, path: str, app_id: str, batch_id: int) -> int:
    """A delta-spark MERGE builder executed once for the batch (``delta_txn``); the unchanged
    target rows it copied: ``numTargetRowsCopied`` of the commit it made, 0 when Delta skipped
    it as landed. Why read it back: copy-on-write grows with the table, not the batch, and is
    what an operator watches (``urbpipe_typed_rows_copied``); ``execute()`` returns only the
    rows it changed. The versions come from the table's ``DeltaLog``, which the JVM keeps per
    table and a commit updates, so no listing of the log; the new commit's own file says
    whether it is this batch's and what it copied (:func:`copied_by`)."""
    jvm: Any = spark.sparkContext._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    before = delta_log.unsafeVolatileSnapshot().version()
    with delta_txn(spark, app_id, batch_id):
        merge.execute()
    after = delta_log.unsafeVolatileSnapshot().version()
    if after == before:  # no new commit: Delta skipped the MERGE, the batch had landed
        return 0
    return copied_by(commit_text(spark, path, after) or "", app_id, batch_id)


def copied_by(commit: str, app_id: str, batch_id: int) -> int:
    """``numTargetRowsCopied`` of a commit file's MERGE if the commit is ``app_id``'s
    ``batch_id`` (its ``txn`` action), else 0."""
    actions = commit_actions(commit, "txn", "commitInfo")
    txn, info = actions.get("txn", {}), actions.get("commitInfo", {})
    if txn.get("appId") != app_id or int(txn.get("version", -1)) != batch_id:
        return 0
    return int((info.get("operationMetrics") or {}).get("numTargetRowsCopied") or 0)
