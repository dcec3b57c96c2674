"""Reconciliation rounds inside the running job (``reconcile.every_minutes``, off by default).

Why a driver thread and not a landing step: a round waits for the job itself — its batches land
the answers and move the watermark — so it cannot run inside a batch. The thread runs
``pipeline.ops.reconcile_cmd.run_round`` (the same round as ``urbpipe reconcile``) every
``every_minutes``, the first one interval after the start (the job catches up first), with the
round ``reconcile.scheduled_round`` names: a random ``sample`` or every ISN the lake knows
(``full``). Each round's verdicts go to the ``reconciliation`` table and its alerts to the
operators as the command's do, and its figures to the job's metrics (``urbpipe_reconcile_*``,
``report``). A round that fails is logged and the next one runs on time: never the query's
failure.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from pipeline.config import Settings
from pipeline.ops.reconcile_cmd import Options, RoundResult, run_round

log = logging.getLogger("urbpipe.reconcile")

Report = Callable[[dict[str, Any]], None]
RunRound = Callable[..., RoundResult]


def summary(result: RoundResult, at: float) -> dict[str, Any]:
    """A round's figures per file, as the metrics take them (plain values only)."""
    files = []
    for fr in result.files:
        proof = fr.verified_through()
        files.append({"subscription": fr.lay.subscription, "dbid": fr.lay.dbid,
                      "fnr": fr.lay.fnr, "verdicts": fr.counts(), "repaired": len(fr.repaired),
                      "verified_through": None if proof is None else
                      proof.replace(tzinfo=UTC).timestamp()})  # naive UTC (reconcile_lake)
    return {"round": result.token, "at": at, "files": files}


class ReconcileSchedule:
    """The job's reconciliation thread (module docstring)."""

    def __init__(self, settings: Settings, report: Report, *, run: RunRound = run_round,
                 wall: Callable[[], float] = time.time) -> None:
        conf = settings.reconcile
        assert conf.every_minutes is not None, "reconcile.every_minutes is not set"
        self._settings, self._report, self._run, self._wall = settings, report, run, wall
        self._every_s = conf.every_minutes * 60
        self._options = Options(full=conf.scheduled_round == "full")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="urbpipe-reconcile",
                                        daemon=True)
        self.rounds = 0   # rounds finished
        self.failures = 0  # rounds that raised

    def start(self) -> ReconcileSchedule:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self.run_once()

    def run_once(self) -> None:
        """One round; its figures reported, a failure logged."""
        try:
            result = self._run(self._settings, self._options,
                               progress=lambda line: log.info("reconcile: %s", line))
        except Exception as exc:  # never the query's failure
            self.failures += 1
            log.warning("reconcile round failed: %s", str(exc).splitlines()[0] if str(exc)
                        else type(exc).__name__)
            return
        self.rounds += 1
        figures = summary(result, self._wall())
        log.info(json.dumps({"event": "reconcile_round", **figures}, default=str))
        self._report(figures)
