"""The job counts its tables' data files and tells an operator when one grows too many.

Why: small files are what slows a long-running lake down (issue 20). Compaction keeps them
bounded — ``urbpipe maintain`` on a schedule, in-job maintenance or Delta's auto compaction —
but when that stops (the cron job was never set up, compaction keeps losing to a concurrent
commit, a table is left out), nothing else notices until analysts' queries crawl. So every
``maintenance.watch_minutes`` the job reads each table's file count from its Delta log (no
data read) and the commit files of its ``_delta_log``, reports both (``files:<table>`` and
``log:<table>`` in the batch's counts, ``urbpipe_table_files`` and ``urbpipe_delta_log_commits``
on Prometheus) and, for a table over ``maintenance.alert_files``, sends a warning alert
(``table_files_high``) like its other alerts: to ``topics.alerts`` and the ``alerts`` table.

Once per table and UTC day: the idempotency key is ``table_files_high|<table>|<day>``, so a
restart the same day repeats the key (consumers drop the repeat) and a table left too big
reminds the operator daily. :class:`FileAlarm` decides, engine-free; :class:`FileWatch` is
the landing step.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch

log = logging.getLogger("urbpipe.file_watch")

KIND = "table_files_high"

#: sends alerts (dicts of the ``alerts`` table's columns) to ``topics.alerts``
Send = Callable[[list[dict[str, Any]]], None]


class FileAlarm:
    """When to count (every ``every_s``, the first time one interval after start: the job's
    first batches catch up) and which counts make an alert (over ``limit``, once per table
    and UTC day). Engine-free; the clocks are the caller's."""

    def __init__(self, limit: int, every_s: float, now: float) -> None:
        self._limit = limit
        self._every_s = every_s
        self._due = now + every_s
        self._told: set[str] = set()  # idempotency keys sent by this run

    def due(self, now: float) -> bool:
        if now < self._due:
            return False
        self._due = now + self._every_s
        return True

    def alerts(self, files: Mapping[str, int], now_ms: int) -> list[dict[str, Any]]:
        """The alerts ``files`` (table → data files) calls for, each once per day."""
        at = datetime.fromtimestamp(now_ms / 1000, UTC)
        out = []
        for table, count in sorted(files.items()):
            key = f"{KIND}|{table}|{at.date().isoformat()}"
            if count <= self._limit or key in self._told:
                continue
            self._told.add(key)
            out.append({
                "idempotency_key": key, "kind": KIND, "severity": "warning",
                "subscription": None, "destination": None, "epoch": None,
                "message": f"table {table} has {count} data files (more than {self._limit}): "
                           "its compaction is not keeping up — run `urbpipe maintain` or see "
                           "why it fails",
                "at": at.isoformat(), "at_ms": now_ms,
                "details": {"table": table, "files": count, "limit": self._limit}})
        return out


class FileWatch:
    """Landing step: every ``maintenance.watch_minutes``, each job table's file count
    (``files:<table>``) and the alerts of :class:`FileAlarm`, landed in ``alerts`` (once per
    batch id, like every append) and sent to ``topics.alerts`` (by ``send``; the job's own
    producer, made at the first alert). A failure to count or alert is logged, never fails
    the query."""

    lap = "t_watch_ms"

    def __init__(self, settings: Settings, tables: Sequence[str], send: Send | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        conf = settings.maintenance
        assert conf.watch_minutes is not None and conf.alert_files is not None
        self._settings, self._tables = settings, tuple(tables)
        self._alarm = FileAlarm(conf.alert_files, conf.watch_minutes * 60, clock())
        self._clock, self._wall = clock, wall
        self._send = send

    def land(self, batch: LandedBatch) -> dict[str, int]:
        if not self._alarm.due(self._clock()):
            return {}
        try:
            files, logs = self._count(batch)
            alerts = self._alarm.alerts(files, int(self._wall() * 1000))
            if alerts:
                self._raise(batch, alerts)
        except Exception as exc:  # never fail the query over a watch
            log.warning("file count of the job's tables failed: %s",
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return {}
        return {**{f"files:{t}": n for t, n in files.items()},
                **{f"log:{t}": n for t, n in logs.items()}, "file_alerts": len(alerts)}

    def _count(self, batch: LandedBatch) -> tuple[dict[str, int], dict[str, int]]:
        """Per table: its data files, and the commit files in its ``_delta_log`` (the log
        growth an operator watches, ``urbpipe_delta_log_commits``)."""
        from pipeline.spark.land.maintenance import is_table, log_commits, table_files
        from pipeline.spark.land.tables import table_path

        spark = batch.session
        paths = {t: table_path(self._settings, t) for t in self._tables}
        present = {t: p for t, p in paths.items() if is_table(spark, p)}
        return ({t: table_files(spark, self._settings, p)[0] for t, p in present.items()},
                {t: log_commits(spark, p) for t, p in present.items()})

    def _raise(self, batch: LandedBatch, alerts: list[dict[str, Any]]) -> None:
        from pipeline.spark.land.writes import append_rows

        rows = [{**a, "at": datetime.fromisoformat(a["at"]), "details": json.dumps(a["details"])}
                for a in alerts]
        append_rows(batch.session, rows, "alerts", self._settings, f"{batch.app_id}-watch",
                    batch.batch_id)
        (self._send or self._producer())(alerts)

    def _producer(self) -> Send:
        """The job's alert sending (``kafka_out.send_requests_and_alerts``: body, key,
        headers, log line, flush), with its own producer, made at the first alert."""
        from pipeline.spark.land.kafka_out import KafkaOut, send_requests_and_alerts

        out = KafkaOut(self._settings)

        def send(alerts: list[dict[str, Any]]) -> None:
            send_requests_and_alerts(self._settings, out, [], alerts)

        self._send = send
        return send
