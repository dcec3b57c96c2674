"""The monitoring files generated from code, and what the Prometheus endpoint serves.

The endpoint is the job's own exporter on an ephemeral port, fed the record of a batch that
touches every kind of metric (per key, per file, per table, maintenance, lag, latency): every
metric it serves must be in docs/metrics.md with that type and those labels, and every metric
of the table must be served.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings, load_settings
from pipeline.ops import monitoring
from pipeline.ops.dashboard import dashboard, panels
from pipeline.ops.prometheus import CATALOG, PrometheusExporter, job_view, observe, samples
from tests.support.monitor_servers import documented_metrics, served_metrics

ROOT = Path(__file__).resolve().parents[3]


def test_the_generated_files_are_their_generators_output() -> None:
    assert monitoring.stale() == [], "run: python -m pipeline.ops.monitoring write"
    assert monitoring.main(["check"]) == 0


def test_check_names_a_file_edited_by_hand(tmp_path: Path) -> None:
    for path, make in monitoring.GENERATED.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(make())
    assert monitoring.stale(tmp_path) == []
    (tmp_path / monitoring.DASHBOARD).write_text("{}")
    assert monitoring.stale(tmp_path) == [monitoring.DASHBOARD]


def full_record(now: float) -> dict[str, Any]:
    """A batch record with something for every metric of the catalogue."""
    commit_us = int((now - 120) * 1e6)
    return {
        "batch_id": 9, "messages": 40, "duration_ms": 1500, "processed_rows_per_s": 26.7,
        "state_rows": 3, "state_memory_bytes": 2048, "open_gaps": 1, "records": 80,
        "bytes": 4096, "recorded_at": now,
        "counts": {"t_state_ms": 900, "t_delta_ms": 400, "files:records": 12,
                   "log:records": 30, "file_stale:10006/11": 1, "maint_skipped": 1,
                   "maint_round_ms": 2000, "maint_last_round_at": int(now),
                   "quarantine_changes_color_4": 2, "typed_ms:COLOR/10006/4": 1250,
                   "typed_copied:COLOR/10006/4": 35000},
        "latency_s": {"commit_to_landed": {"p50": 1.0, "p99": 2.0, "count": 3.0}},
        "input_lag": {"urb.out1": 7},
        "keys": [{"destination": "OUT1", "subscription": "COLOR", "transactions": 3,
                  "duplicates": 1, "alert_kinds": {"gap_open|warning": 1},
                  "gap_rows": {"open": 1}, "quarantine_sources": {"decode": 1},
                  "request_kinds": {"TRAN": 2}, "file_commits_us": {"10006/4": commit_us},
                  "gap_states": {"open": 1}, "oldest_gap_ms": int((now - 60) * 1000),
                  "outstanding": {"TRAN": 2, "INST": 0}, "storm": 0, "idle": 0}],
    }


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    conf = tmp_path / "c.yaml"
    conf.write_text("maintenance: {every_minutes: 10}\nstream: {freshness_objective_seconds: 60}\n")
    return load_settings(conf, env={})


def test_every_served_metric_is_in_the_table_and_every_metric_there_is_served(
        settings: Settings) -> None:
    now = time.time()
    view = job_view(settings, stale={(10006, 4): False})
    exporter = PrometheusExporter(0, view=view)
    try:
        exporter.observe(full_record(now))
        exporter.reconciled({"round": "RCNTEST1", "at": now, "files": [  # an in-job round
            {"subscription": "COLOR", "dbid": 10006, "fnr": 4, "verdicts": {"match": 3},
             "repaired": 0, "verified_through": now - 60}]})
        body = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics",
                                      timeout=5).read().decode()
    finally:
        exporter.close()
    table, got = documented_metrics(), served_metrics(body)
    assert len(table) == len(CATALOG)
    differ = [(n, got[n], table[n]) for n in set(got) & set(table) if got[n] != table[n]]
    assert got == table, (
        f"served, not in docs/metrics.md: {sorted(set(got) - set(table))}; in the table, not "
        f"served: {sorted(set(table) - set(got))}; differing: {differ}")


def test_freshness_and_ages_are_computed_when_scraped(settings: Settings) -> None:
    now = time.time()
    view = job_view(settings)
    observe(view, full_record(now))
    later = samples(view, now + 30)
    file = ("OUT1", "COLOR", "10006", "4")
    assert later["urbpipe_freshness_seconds"][file] == pytest.approx(150, abs=0.01)
    assert later["urbpipe_freshness_objective_seconds"][file] == 60
    assert later["urbpipe_gaps_oldest_open_age_seconds"][("OUT1", "COLOR")] == pytest.approx(
        90, abs=0.01)
    assert later["urbpipe_file_stale"] == {("10006", "11"): 1.0, ("10006", "4"): 0.0}
    assert later["urbpipe_quarantine_rows_total"][("payload",)] == 2
    assert later["urbpipe_maintenance_interval_seconds"][()] == 600
    assert later["urbpipe_typed_file_seconds"] == {("COLOR", "10006", "4"): 1.25}
    assert later["urbpipe_typed_rows_copied"] == {("COLOR", "10006", "4"): 35000}


def test_every_configured_key_has_its_series_from_the_start(settings: Settings) -> None:
    view = job_view(settings)
    found = samples(view, time.time())
    key = ("OUT1", "COLOR")  # the default conf's one subscription
    assert found["urbpipe_transactions_total"][key] == 0
    assert found["urbpipe_gap_transitions_total"][(*key, "unrecoverable")] == 0
    assert found["urbpipe_gaps_oldest_open_age_seconds"][key] == 0
    assert found["urbpipe_storm_breaker_tripped"][key] == 0
    assert set(found["urbpipe_quarantine_rows_total"]) == {
        ("decode",), ("decode_warning",), ("reassembly",), ("gfft",), ("payload",)}


def test_a_later_batch_without_gaps_sets_the_keys_gauges_back() -> None:
    settings = Settings()
    view = job_view(settings)
    record = full_record(time.time())
    observe(view, record)
    # as key_totals writes it: nothing open, nothing outstanding, so those are left out
    quiet = {**record, "keys": [{"destination": "OUT1", "subscription": "COLOR", "idle": 1}]}
    observe(view, quiet)
    found = samples(view, time.time())
    assert found["urbpipe_gaps_open"][("OUT1", "COLOR", "open")] == 0
    assert found["urbpipe_requests_outstanding"][("OUT1", "COLOR", "TRAN")] == 0
    assert found["urbpipe_gaps_oldest_open_age_seconds"][("OUT1", "COLOR")] == 0
    assert found["urbpipe_subscription_idle"][("OUT1", "COLOR")] == 1
    assert found["urbpipe_transactions_total"][("OUT1", "COLOR")] == 3
    assert found["urbpipe_batches_total"][()] == 2


def test_dashboard_panels_name_only_catalogued_metrics_and_rules() -> None:
    names = {m.name for m in CATALOG}
    recorded = set(re.findall(r"record: (\S+)", (ROOT / monitoring.RULES).read_text()))
    for panel in panels():
        for query in panel.queries:
            used = set(re.findall(r"\b(urbpipe[:_][a-z0-9_:]+)", query.expr))
            assert used and used <= names | recorded, (panel.title, used - names - recorded)
    model = dashboard()
    assert model["uid"] == "urbpipe-oncall"
    assert sum(1 for p in model["panels"] if p["type"] == "timeseries") == len(panels())
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))


def test_where_names_files_that_exist_and_the_endpoint(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """What `make demo` ends with (devtools/demo.py prints monitoring.where)."""
    lines = monitoring.where(Settings(stream={"prometheus_port": 9464,
                                              "prometheus_address": "0.0.0.0"}))
    assert lines[0].startswith("metrics:      http://0.0.0.0:9464/metrics")
    paths = re.findall(r"(/\S+\.(?:md|yml|json))(?=[\s;)]|$)", "\n".join(lines))
    assert len(paths) == 6 and all(Path(p).exists() for p in paths), paths  # not metrics.jsonl
    assert "off (set stream.prometheus_port)" in monitoring.where(Settings())[0]
    assert monitoring.main(["where", "--conf-file", str(ROOT / "conf" / "test.yaml")]) == 0
    assert "runbook:" in capsys.readouterr().out
