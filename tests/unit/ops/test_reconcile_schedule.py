"""The job's in-job reconciliation rounds (``reconcile.every_minutes``) without Spark: rounds
on time, figures to the metrics (served on a real Prometheus endpoint), a failing round logged
and the next one run."""

from __future__ import annotations

import time
import urllib.request
from datetime import datetime

import pytest

from pipeline.config import Layout, Settings
from pipeline.ops.prometheus import PrometheusExporter, job_view
from pipeline.ops.reconcile_cmd import FileRound, RoundResult
from pipeline.ops.reconcile_schedule import ReconcileSchedule, summary
from pipeline.reconciliation.verdicts import Verdict

LAY = Layout(subscription="COLOR", dbid=10006, fnr=4, format_buffer="AA,16,A.",
             columns={"AA": "color"})
READ = datetime(2026, 11, 29, 8, 0, 0)


def _result(token: str = "RCNTEST1", *, full: bool = True) -> RoundResult:
    fr = FileRound(LAY, [1, 2, 3], full=full)
    read = (READ, 1, 0, 1)
    fr.verdicts = [Verdict(1, "match", answer_version=read),
                   Verdict(2, "differs", ("color",), answer_version=read),
                   Verdict(3, "match", answer_version=read)]
    fr.repaired = {2}
    return RoundResult(token, [fr], READ, 1)


def _scheduled(settings: Settings, minutes: float = 1.0) -> Settings:
    return settings.model_copy(update={"reconcile": settings.reconcile.model_copy(
        update={"every_minutes": minutes})})


def test_summary_per_file() -> None:
    got = summary(_result(), at=1000.0)
    assert got["round"] == "RCNTEST1" and got["at"] == 1000.0
    (f,) = got["files"]
    assert (f["subscription"], f["dbid"], f["fnr"]) == ("COLOR", 10006, 4)
    assert f["verdicts"] == {"match": 2, "differs": 1} and f["repaired"] == 1
    assert f["verified_through"] == pytest.approx(1795939200.0)  # 2026-11-29 08:00 UTC
    assert summary(_result(full=False), 0)["files"][0]["verified_through"] is None


def test_rounds_run_on_time_and_a_failure_is_not_the_jobs(ops_settings: Settings) -> None:
    calls: list[str] = []
    reported: list[dict] = []

    def run(settings: Settings, options, progress):
        calls.append("sample" if not options.full else "full")
        if len(calls) == 2:
            raise RuntimeError("broker went away\nmore lines")
        return _result()

    schedule = ReconcileSchedule(_scheduled(ops_settings, 0.002), reported.append, run=run)
    schedule.start()
    deadline = time.monotonic() + 10
    while schedule.rounds < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    schedule.stop()
    assert schedule.rounds >= 3 and schedule.failures == 1
    assert len(reported) == schedule.rounds and set(calls) == {"sample"}
    n = len(calls)
    time.sleep(0.3)
    assert len(calls) == n, "no round after stop"


def test_the_figures_are_served_on_prometheus(ops_settings: Settings) -> None:
    settings = _scheduled(ops_settings)
    exporter = PrometheusExporter(0, view=job_view(settings, started=1.0))
    try:
        def scrape() -> str:
            url = f"http://127.0.0.1:{exporter.port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.read().decode()

        assert "urbpipe_reconcile_rounds_total 0.0" in scrape()
        exporter.reconciled(summary(_result(), at=2000.0))
        exporter.reconciled(summary(_result("RCNTEST2", full=False), at=3000.0))
        text = scrape()
    finally:
        exporter.close()
    file = 'dbid="10006",fnr="4",subscription="COLOR"'
    assert "urbpipe_reconcile_rounds_total 2.0" in text
    assert "urbpipe_reconcile_last_round_timestamp_seconds 3000.0" in text
    assert f'urbpipe_reconcile_isns_total{{{file},verdict="differs"}} 2.0' in text
    assert f'urbpipe_reconcile_isns_total{{{file},verdict="match"}} 4.0' in text
    assert f"urbpipe_reconcile_repaired_total{{{file}}} 2.0" in text
    assert f"urbpipe_reconcile_verified_through_timestamp_seconds{{{file}}} 1.7959392e+09" \
        in text


def test_the_job_refuses_a_schedule_with_no_file_to_check(conf_file, capsys) -> None:
    """``reconcile.every_minutes`` with no file that has a layout and an initial-state
    definition: jobs/stream.py exits 2 with one line, before it contacts Kafka."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "jobs" / "stream.py"
    spec = importlib.util.spec_from_file_location("job_stream_entry", path)
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    conf_file.write_text(conf_file.read_text() + "reconcile:\n  every_minutes: 5\n")
    assert job.main(["--conf-file", str(conf_file)]) == 2
    assert "reconcile.every_minutes: reconcile: no file to check" in capsys.readouterr().err
