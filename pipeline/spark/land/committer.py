"""Direct writer, driver side: commit the data files the state tasks wrote, exactly once.

The commit goes through delta-spark's own transaction, as its streaming sink does: an
``OptimisticTransaction`` of the table commits one ``AddFile`` per file plus a
``SetTransaction`` (app id, batch id), as the operation ``STREAMING UPDATE`` with the batch's
ledger tag as ``userMetadata``. Delta does the rest (conflict check, the log entry, checksum,
checkpoints). The actions are built from their JSON form in the Delta protocol and parsed by
delta-spark (``Action.fromJson``), so no constructor of its internal case classes is called.

Exactly once, like the Spark appends (``pipeline.spark.land.writes``): a batch whose tag the table's
log already holds (``pipeline.spark.land.ledger``) is not committed again; when the log cannot tell,
the table's own ``SetTransaction`` for the app id decides. Both carry the same app id
(``<app>-<table>``) and tag as a Spark append would, so a restart may switch
``stream.raw_writer`` either way. The files of a batch that is not committed are handed back
to the caller: they hold the same rows as the committed ones (a replay of a micro-batch reads
the same offsets from the same state), so a later step of the batch (the direct typed writer)
may still read them; the batch writer deletes them once its steps are done.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.spark.land.ledger import CommitLedger

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.sink")


def add_action(file: Mapping[str, Any]) -> str:
    """The Delta protocol's ``add`` action of one data file a task wrote."""
    return json.dumps({"add": {
        "path": file["path"], "partitionValues": {}, "size": int(file["size"]),
        "modificationTime": int(file["modification_time"]), "dataChange": True,
        "stats": file["stats"]}})


def txn_action(app_id: str, batch_id: int, now_ms: int) -> str:
    """The ``txn`` (SetTransaction) action: Delta's own record of the batch landing."""
    return json.dumps({"txn": {"appId": app_id, "version": int(batch_id),
                               "lastUpdated": int(now_ms)}})


class DeltaCommitter:
    """Commits files to Delta tables with delta-spark's transaction API (through py4j)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._jvm: Any = spark.sparkContext._jvm

    def commit(self, path: str, files: list[Mapping[str, Any]], app_id: str, batch_id: int,
               ledger: CommitLedger) -> bool:
        """Commit ``files`` (relative to ``path``) as ``batch_id``; False if it had landed
        (the files are then unreferenced: the caller deletes them, :meth:`delete`)."""
        landed = ledger.landed(path, batch_id)
        jvm = self._jvm
        txn = None
        if not landed:  # the ledger's answer first: a replay it knows needs no transaction
            txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
                self._spark._jsparkSession, path).startTransaction()
        if txn is None or (landed is None and txn.txnVersion(app_id) >= batch_id):
            log.info("batch %s already in %s: skipped", batch_id, path)
            return False
        parse = getattr(getattr(jvm.org.apache.spark.sql.delta.actions, "Action$"), "MODULE$")
        actions = [parse.fromJson(add_action(f)) for f in files]
        actions.append(parse.fromJson(txn_action(app_id, batch_id, int(time.time() * 1000))))
        operation = jvm.org.apache.spark.sql.delta.DeltaOperations.StreamingUpdate(
            jvm.org.apache.spark.sql.streaming.OutputMode.Append(), app_id, int(batch_id),
            jvm.scala.Some(ledger.tag(batch_id)))
        txn.commit(self._seq(actions), operation, self._empty_map())
        return True

    def _seq(self, items: list[Any]) -> Any:
        jlist = self._jvm.java.util.ArrayList()
        for item in items:
            jlist.add(item)
        return self._jvm.scala.jdk.javaapi.CollectionConverters.asScala(jlist).toList()

    def _empty_map(self) -> Any:
        return getattr(getattr(self._jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()

    def delete(self, path: str, names: Iterable[str]) -> None:
        """Best effort: a file left behind is unreferenced, and VACUUM removes it anyway."""
        jvm = self._jvm
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        for name in names:
            try:
                target = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/{name}")
                target.getFileSystem(conf).delete(target, False)
            except Exception as exc:  # never fail a batch over garbage
                log.warning("could not delete unreferenced file %s/%s: %s", path, name, exc)
