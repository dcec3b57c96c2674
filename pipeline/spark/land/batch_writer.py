"""The foreachBatch function: one streaming batch through an ordered list of landing steps.

A step is a small object with one entry point, ``land(batch)``, that receives the batch
(:class:`LandedBatch`: the persisted output rows, their counts, the state calls' metrics rows
and the direct writer's files) and returns the rows it landed per table. The job's list, in
order (``pipeline.spark.engine.query.landing_steps``): the raw tables
(``pipeline.spark.land.raw``), the typed tables and the lifecycle events
(``pipeline.spark.typed``, with conf layouts), requests and alerts to Kafka
(``pipeline.spark.land.kafka_out``), the batch's metrics (``pipeline.spark.land.report``).
No step imports another: what one needs of an earlier one is in the batch's counts.

Exactly once into Delta: every append is tagged with the app id (derived from the checkpoint's
query id, so a lost checkpoint that restarts batch ids at 0 gets a new app id) and the batch id,
and skipped when the table's log shows that batch already landed (``pipeline.spark.land.ledger``;
Delta's own txnAppId/txnVersion when the log cannot tell), so a batch replayed after a crash
lands nothing twice (``pipeline.spark.land.writes``). The state function is deterministic, so
the replayed batch's rows are the ones that were (or were not) committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.config import Settings
from pipeline.spark.land.datafiles import BATCH_PROPERTY, FILES_TABLE, writer_mode
from pipeline.spark.land.ledger import CommitLedger
from pipeline.spark.land.tables import DIRECT_TABLES, STATS_TABLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class LandedBatch:
    """What every landing step receives: one streaming batch as the state stage emitted it."""

    frame: DataFrame                 # the persisted (table, json, blob) output rows
    batch_id: int
    app_id: str                      # the checkpoint's query id (txnAppId prefix, ledger tag)
    rows: Mapping[str, int]          # output rows per table (the direct tables' mirrors too)
    stats: list[dict[str, Any]]      # the state calls' metrics rows (STATS_TABLE)
    files: list[dict[str, Any]]      # the direct writer's file descriptions (FILES_TABLE)
    ledger: CommitLedger
    clock: PhaseClock
    #: rows to land per table, then what the steps landed (and the metrics gauges)
    counts: dict[str, int] = field(default_factory=dict)
    #: what runs once every step has landed the batch: deleting the files of a replay whose
    #: raw commit was skipped (a later step of the same batch reads them)
    on_done: list[Callable[[], None]] = field(default_factory=list)

    @property
    def session(self) -> SparkSession:
        return self.frame.sparkSession

    def collect(self, table: str) -> list[dict[str, Any]]:
        """The batch's rows of a small table (requests, alerts) as dicts, on the driver."""
        from pyspark.sql import functions as F

        rows = self.frame.where(F.col("table") == table).select("json").collect()
        return [json.loads(r["json"]) for r in rows]


class LandingStep(Protocol):
    """One room of the batch writer. ``lap``: the ``counts.t_*_ms`` name its time is reported
    under (None: counted in the next step's lap)."""

    lap: str | None

    def land(self, batch: LandedBatch) -> Mapping[str, int]:
        """Land the batch's share of this step; rows landed per table."""
        ...


class PhaseClock:
    """Milliseconds per phase of one batch (metrics JSONL ``counts.t_*_ms``): where time goes."""

    def __init__(self, started: float) -> None:
        self.started = started
        self._last = started
        self.laps: dict[str, int] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = int((now - self._last) * 1000)
        self._last = now


def batch_writer(settings: Settings, app_id: str, steps: Sequence[LandingStep]
                 ) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function running ``steps`` in order on every batch."""
    ledgers: dict[int, CommitLedger] = {}  # one per Spark session (a restart makes a new one)
    # Open gaps per key as of the key's latest call: a key is only called with data or when
    # its timer fires, and its gaps change only then, so the sum is the job's open gaps.
    open_gaps: dict[tuple[str, str], int] = {}
    direct = writer_mode(settings) == "direct"  # the state tasks write the bulk tables

    def write_batch(frame: DataFrame, batch_id: int) -> None:
        # foreachBatch re-runs the whole plan (including the state function) per action.
        clock = PhaseClock(time.monotonic())
        session = frame.sparkSession
        # The direct writer's tasks name their files and rows by it (datafiles.py).
        session.sparkContext.setLocalProperty(BATCH_PROPERTY, str(batch_id))
        frame = frame.persist()
        try:
            rows, stats, files = count_tables(frame, few_rows=direct)
            # with the direct writer the bulk tables' JSON rows are mirrors for later stages
            counts = {t: n for t, n in rows.items() if not (direct and t in DIRECT_TABLES)}
            counts["bytes"] = sum(int(row["bytes"]) for row in stats)
            open_gaps.update({(row["destination"], row["subscription"]): int(row["open_gaps"])
                              for row in stats})
            counts["open_gaps"] = sum(open_gaps.values())
            clock.lap("t_state_ms")  # Kafka read, decode and the state function run here
            if id(session) not in ledgers:
                ledgers[id(session)] = CommitLedger(session, app_id)
            batch = LandedBatch(frame, batch_id, app_id, rows, stats, files,
                                ledgers[id(session)], clock, counts)
            for step in steps:
                counts.update(step.land(batch))
                if step.lap is not None:
                    clock.lap(step.lap)
            for done in batch.on_done:
                done()
        finally:
            frame.unpersist()

    return write_batch


def count_tables(batch: DataFrame, *, few_rows: bool = False
                 ) -> tuple[dict[str, int], list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per table, the state calls' metrics rows (``STATS_TABLE``) and the direct
    writer's file descriptions (``FILES_TABLE``), in one job.

    ``few_rows`` (the direct writer): the bulk tables' rows are in the tasks' files, so the
    batch holds tens of rows (a bad batch's quarantine: one per message), and each row's
    table name goes to the driver as it is, in a job of one stage. Otherwise (Spark appends
    every table: hundreds of thousands of rows) the executors count, and the driver gets a
    row per table."""
    from pyspark.sql import functions as F

    small = F.col("table").isin(STATS_TABLE, FILES_TABLE)
    if few_rows:
        tables: dict[str, int] = {}
        found: dict[str, list[dict[str, Any]]] = {STATS_TABLE: [], FILES_TABLE: []}
        for r in batch.select("table", F.when(small, F.col("json")).alias("json")).collect():
            if r["table"] in found:
                found[r["table"]].append(json.loads(r["json"]))
            else:
                tables[r["table"]] = tables.get(r["table"], 0) + 1
        return tables, found[STATS_TABLE], found[FILES_TABLE]
    rows = (batch.groupBy("table")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.collect_list(F.when(small, F.col("json"))).alias("small"))
            .collect())
    counts = {r["table"]: int(r["count"]) for r in rows
              if r["table"] not in (STATS_TABLE, FILES_TABLE)}
    found = {r["table"]: [json.loads(j) for j in r["small"]] for r in rows
             if r["table"] in (STATS_TABLE, FILES_TABLE)}
    return counts, found.get(STATS_TABLE, []), found.get(FILES_TABLE, [])
