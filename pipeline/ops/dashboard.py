"""The job's Grafana dashboard, generated from code (never edited by hand).

Why code: every panel's query names metrics of ``pipeline.ops.prometheus.CATALOG``; written
here the panels are data a test can check (each query's metrics exist; the e2e test runs each
against a real Prometheus scraping the job and wants data back), and the JSON in
``monitoring/grafana/urbpipe-dashboard.json`` is this module's output
(``python -m pipeline.ops.monitoring dashboard``; a test keeps them equal).

Import it into Grafana (Dashboards → New → Import) and pick the Prometheus data source that
scrapes the job. ``$subscription`` selects subscriptions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TITLE = "urbpipe: replicator → Kafka → Delta"
UID = "urbpipe-oncall"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SUB = 'subscription=~"$subscription"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str
    stacked: bool = False


def _q(expr: str, legend: str) -> Query:
    return Query(expr, legend)


#: Rows of panels: (row title, panels), top to bottom.
ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Liveness and throughput", (
        Panel("Since the last batch", "s", (
            _q("time() - urbpipe_batch_end_timestamp_seconds", "since last batch"),),
            "Seconds since the newest micro-batch ended: grows while the job is stuck or down "
            "(alert UrbpipeJobNotProgressing)."),
        Panel("Transactions landed per second", "ops", (
            _q(f"sum by (subscription) (rate(urbpipe_transactions_total{{{SUB}}}"
               "[$__rate_interval]))", "{{subscription}}"),), "Per subscription."),
        Panel("Messages read per second", "ops", (
            _q("rate(urbpipe_messages_total[$__rate_interval])", "messages"),
            _q("rate(urbpipe_duplicates_total[$__rate_interval])", "duplicates {{subscription}}")),
            "Kafka messages read; duplicates dropped (redeliveries, resends already landed)."),
    )),
    ("Lag and freshness", (
        Panel("Input lag (messages behind the topic's end)", "short", (
            _q("urbpipe_input_lag_messages", "{{topic}}"),),
            "From Spark's Kafka source after each batch (alert UrbpipeInputLagGrowing)."),
        Panel("Freshness per file", "s", (
            _q(f"urbpipe_freshness_seconds{{{SUB}}}", "{{subscription}} {{dbid}}/{{fnr}}"),
            _q(f"max(urbpipe_freshness_objective_seconds{{{SUB}}})", "objective")),
            "Now minus the commit time of the newest landed transaction that changed the file. "
            "An idle subscription (below) is not late."),
        Panel("Idle subscriptions (STAT answered, nothing sent)", "short", (
            _q(f"urbpipe_subscription_idle{{{SUB}}}", "{{destination}}/{{subscription}}"),),
            "1: the replicator's STAT/SUBS said nothing more was sent; 0: data is flowing or "
            "the job is behind."),
        Panel("Freshness error budget burn rate (1 h)", "short", (
            _q(f"urbpipe:freshness_bad:ratio_rate1h{{{SUB}}} / 0.01",
               "{{subscription}} {{dbid}}/{{fnr}}"),),
            "1 spends the month's budget (1 % of the time late) in a month; 14.4 pages "
            "(UrbpipeFreshnessBudgetBurnFast)."),
        Panel("Latency p99 per leg", "s", (
            _q('urbpipe_latency_seconds{quantile="p99"}', "{{leg}}"),),
            "Adabas commit → replicator processed → sent → landed in Delta."),
    )),
    ("Gaps and requests", (
        Panel("Open gaps by state", "short", (
            _q(f"sum by (subscription, state) (urbpipe_gaps_open{{{SUB}}})",
               "{{subscription}} {{state}}"),), "Gaps waiting for a resend.", stacked=True),
        Panel("Gap transitions", "short", (
            _q(f"sum by (state) (increase(urbpipe_gap_transitions_total{{{SUB}}}"
               "[$__rate_interval]))", "{{state}}"),),
            "unrecoverable: transactions lost for good (runbook: gap_unrecoverable)."),
        Panel("Oldest open gap", "s", (
            _q(f"urbpipe_gaps_oldest_open_age_seconds{{{SUB}}}", "{{subscription}}"),),
            "Age of each key's oldest open gap (alert UrbpipeGapOpenTooLong)."),
        Panel("Requests outstanding", "short", (
            _q(f"sum by (subscription, kind) (urbpipe_requests_outstanding{{{SUB}}})",
               "{{subscription}} {{kind}}"),),
            "TRAN tsnrs asked and not answered; INST requests tracked."),
        Panel("Requests sent", "short", (
            _q(f"sum by (kind) (increase(urbpipe_requests_total{{{SUB}}}[$__rate_interval]))",
               "{{kind}}"),), "TRAN, INST and STAT requests to the replicator's input topic."),
        Panel("Storm breaker tripped", "short", (
            _q(f"urbpipe_storm_breaker_tripped{{{SUB}}}", "{{destination}}/{{subscription}}"),),
            "1: requests stopped for the key until `urbpipe gaps resume`."),
    )),
    ("Batch legs and state", (
        Panel("Batch legs", "s", (
            _q("urbpipe_batch_phase_seconds", "{{phase}}"),),
            "Where the newest batch's time went.", stacked=True),
        Panel("Batch duration", "s", (
            _q("urbpipe_batch_duration_seconds", "batch"),), "The newest micro-batch."),
        Panel("State store", "bytes", (
            _q("urbpipe_batch_state_memory_bytes", "memory"),),
            "Reassembly state (open transactions, gaps, duplicate windows)."),
    )),
    ("Quarantine, alerts and tables", (
        Panel("Quarantined rows", "short", (
            _q("sum by (source) (increase(urbpipe_quarantine_rows_total[$__rate_interval]))",
               "{{source}}"),), "By source (runbook: UrbpipeQuarantineGrowing).", stacked=True),
        Panel("Alerts sent", "short", (
            _q("sum by (kind) (increase(urbpipe_alerts_total[$__rate_interval]))", "{{kind}}"),),
            "The job's own alerts (topics.alerts)."),
        Panel("Stale files", "short", (
            _q("urbpipe_file_stale", "{{dbid}}/{{fnr}}"),),
            "1: the file's typed tables are stale (`urbpipe files`)."),
        Panel("Typed landing per file", "s", (
            _q("urbpipe_typed_file_seconds", "{{subscription}}/{{dbid}}/{{fnr}}"),),
            "A file's typed tables in the newest batch with its records."),
        Panel("Typed rows copied per file", "short", (
            _q("urbpipe_typed_rows_copied", "{{subscription}}/{{dbid}}/{{fnr}}"),),
            "Unchanged rows rewritten by copy-on-write: grows with the tables "
            "(alert UrbpipeTypedCopyHigh)."),
        Panel("Data files per table", "short", (
            _q("urbpipe_table_files", "{{table}}"),), "Small files slow every reader."),
        Panel("Delta log commits per table", "short", (
            _q("urbpipe_delta_log_commits", "{{table}}"),),
            "Delta lists the log at every commit (alert UrbpipeDeltaLogLong)."),
        Panel("Maintenance", "short", (
            _q("increase(urbpipe_maintenance_rounds_total[$__rate_interval])", "rounds"),
            _q("increase(urbpipe_maintenance_skipped_total[$__rate_interval])", "skipped")),
            "In-job compaction rounds and the tables they skipped."),
    )),
)


def panels() -> list[Panel]:
    return [p for _, row in ROWS for p in row]


def _panel_json(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid, "type": "timeseries", "title": panel.title, "description": panel.description,
        "datasource": DATASOURCE, "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": {
            "stacking": {"mode": "normal" if panel.stacked else "none"}}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [{"datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend,
                     "refId": chr(ord("A") + i)} for i, q in enumerate(panel.queries)],
    }


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    out: list[dict[str, Any]] = []
    y, pid = 0, 1
    for title, row in ROWS:
        out.append({"id": pid, "type": "row", "title": title, "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, panel in enumerate(row):
            out.append(_panel_json(panel, pid, (i % 3) * 8, y + (i // 3) * 8))
            pid += 1
        y += 8 * ((len(row) + 2) // 3)
    return {
        "title": TITLE, "uid": UID, "editable": True, "schemaVersion": 39, "version": 1,
        "tags": ["urbpipe", "adabas", "kafka", "delta"], "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s", "timezone": "utc", "graphTooltip": 1, "panels": out,
        "annotations": {"list": []},
        "description": "Generated by pipeline/ops/dashboard.py; runbook: docs/runbook.md",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus", "current": {}, "hide": 0},
            {"name": "subscription", "type": "query", "datasource": DATASOURCE,
             "query": {"query": "label_values(urbpipe_transactions_total, subscription)",
                       "refId": "subscriptions"},
             "definition": "label_values(urbpipe_transactions_total, subscription)",
             "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
             "current": {"text": "All", "value": "$__all"}, "hide": 0}]},
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
