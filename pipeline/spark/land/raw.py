"""Landing step: every raw table's rows of the batch into Delta, exactly once.

The tables are independent Delta logs: they commit concurrently, which hides most of the
per-commit latency. The direct writer's files (none when Spark appends every table) are
committed by the driver (``pipeline.spark.land.committer``); the other tables' JSON rows are
appended by Spark (each its own Spark job, ``pipeline.spark.land.writes.write_once``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.committer import DeltaCommitter
from pipeline.spark.land.datafiles import BATCH_PROPERTY
from pipeline.spark.land.tables import TABLES, table_frame, table_path
from pipeline.spark.land.writes import write_once

_WRITERS = 4


class RawTables:
    """The raw tables (transactions, records, images, status events, gaps, alerts, requests,
    quarantine, …); rows landed per direct table."""

    lap = "t_delta_ms"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def land(self, batch: LandedBatch) -> dict[str, int]:
        settings, batch_id, app_id = self._settings, batch.batch_id, batch.app_id
        session = batch.session
        by_table: dict[str, list[dict[str, Any]]] = {}
        for file in batch.files:
            by_table.setdefault(file["table"], []).append(file)
        committer = DeltaCommitter(session)
        with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
            commits = {table: pool.submit(committer.commit, table_path(settings, table), found,
                                          f"{app_id}-{table}", batch_id, batch.ledger)
                       for table, found in by_table.items()}
            futures = list(commits.values())
            futures += [pool.submit(_in_batch, session, batch_id, write_once,
                                    table_frame(batch.frame, table, batch_id),
                                    table_path(settings, table), f"{app_id}-{table}",
                                    batch_id, batch.ledger)
                        for table in TABLES if batch.counts.get(table)]
            for future in futures:
                future.result()
        for table, done in commits.items():
            if not done.result():  # a replay of a landed batch: its files go once all is done
                path = table_path(settings, table)
                batch.on_done.append(lambda p=path, fs=by_table[table]: committer.delete(
                    p, (f["path"] for f in fs)))
        return {table: sum(int(f["rows"]) for f in found) for table, found in by_table.items()}


def _in_batch(session: Any, batch_id: int, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` in a writer thread with the batch's local property: should Spark recompute
    a lost partition of the persisted batch there, its state tasks need it too."""
    session.sparkContext.setLocalProperty(BATCH_PROPERTY, str(batch_id))
    fn(*args)
