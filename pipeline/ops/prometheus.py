"""The job's metrics on a Prometheus endpoint: every metric's name, type, labels and meaning in
one catalogue, the job's view built from the per-batch records, and the HTTP server.

Why one catalogue (:data:`CATALOG`): the endpoint serves exactly its metrics, docs/metrics.md
is generated from it (``python -m pipeline.ops.monitoring write``), the rules and the
dashboard name its metrics, and tests hold the three to it. A metric is served from the
job's start (counters at 0, every configured (destination, subscription) and every file the
job has landed or marked), so a rule or panel has data before the first incident.

Labels: ``destination``, ``subscription`` (the replicator's names), a file as ``dbid`` and
``fnr`` (a subscription may span databases), ``topic`` for Kafka, ``table`` for Delta.
Freshness and ages are computed when Prometheus scrapes (now minus the time), so a job that
stops landing shows its freshness growing even though no batch reports it.

The endpoint listens on ``stream.prometheus_address``:``stream.prometheus_port`` (default
127.0.0.1: the driver's machine only; on YARN or Kubernetes 0.0.0.0 and the driver's container
port, conf/README.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Settings

#: Quarantine sources (``quarantine.source``) served from the start: the decode stage's, the
#: state machine's, a GFFT no layout is built from, a typed value that does not decode.
QUARANTINE_SOURCES = ("decode", "decode_warning", "reassembly", "gfft", "payload")
#: Gap transitions (``gaps.state``) and the states an open gap is in.
GAP_TRANSITIONS = ("open", "requested", "filled", "unrecoverable", "filled_late", "lost")
OPEN_GAP_STATES = ("open", "requested")
REQUEST_KINDS = ("TRAN", "INST", "STAT")
#: Batch phases (``counts.t_<phase>_ms`` of the batch writer's steps).
PHASES = ("state", "delta", "typed", "kafka", "maintain", "watch", "latency")

KEY = ("destination", "subscription")
FILE = ("destination", "subscription", "dbid", "fnr")
RECONCILE_FILE = ("subscription", "dbid", "fnr")
VERDICTS = ("match", "differs", "missing_in_lake", "extra_in_lake", "unanswered")


@dataclass(frozen=True)
class Metric:
    """One metric as served: ``name`` with ``_total`` for counters."""

    name: str
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...]
    meaning: str
    group: str


def _m(group: str, name: str, kind: str, labels: tuple[str, ...], meaning: str) -> Metric:
    return Metric(name, kind, labels, meaning, group)


CATALOG: tuple[Metric, ...] = (
    _m("liveness", "urbpipe_start_timestamp_seconds", "gauge", (),
       "when this run of the job started (Unix seconds): a change is a restart"),
    _m("liveness", "urbpipe_batch_end_timestamp_seconds", "gauge", (),
       "when the newest micro-batch ended (Unix seconds); the start time before the first"),
    _m("liveness", "urbpipe_batch_last_batch_id", "gauge", (), "id of the newest micro-batch"),
    _m("liveness", "urbpipe_batches_total", "counter", (), "micro-batches since the job started"),
    _m("liveness", "urbpipe_batch_duration_seconds", "gauge", (),
       "duration of the newest micro-batch"),
    _m("liveness", "urbpipe_batch_phase_seconds", "gauge", ("phase",),
       "where the newest batch's time went: state (Kafka read, decode, reassembly), delta "
       "(raw tables), typed, kafka (requests and alerts), maintain, watch, latency"),
    _m("throughput", "urbpipe_batch_messages", "gauge", (), "Kafka messages in the newest batch"),
    _m("throughput", "urbpipe_batch_processed_rows_per_second", "gauge", (),
       "Kafka messages processed per second in the newest batch (Spark's figure)"),
    _m("throughput", "urbpipe_messages_total", "counter", (),
       "Kafka messages read since the job started"),
    _m("throughput", "urbpipe_bytes_total", "counter", (),
       "bytes of Kafka messages read since the job started"),
    _m("throughput", "urbpipe_records_total", "counter", (),
       "records (URBR) landed since the job started"),
    _m("throughput", "urbpipe_transactions_total", "counter", KEY,
       "transactions landed since the job started"),
    _m("throughput", "urbpipe_duplicates_total", "counter", KEY,
       "duplicates dropped (a connector's redelivery, a resend already landed) since start"),
    _m("lag", "urbpipe_input_lag_messages", "gauge", ("topic",),
       "Kafka messages behind the topic's end after the newest batch (Spark's Kafka source: "
       "latest offset minus the batch's end offset, summed over partitions)"),
    _m("lag", "urbpipe_latency_seconds", "gauge", ("leg", "quantile"),
       "latency of the newest batch's transactions per leg: commit_to_processed, "
       "processed_to_sent, sent_to_landed, commit_to_landed (p50, p99)"),
    _m("freshness", "urbpipe_last_commit_timestamp_seconds", "gauge", FILE,
       "commit time (URBTTTIM) of the newest landed transaction that changed the file"),
    _m("freshness", "urbpipe_freshness_seconds", "gauge", FILE,
       "now minus that commit time, when Prometheus scrapes"),
    _m("freshness", "urbpipe_freshness_objective_seconds", "gauge", FILE,
       "the freshness objective (stream.freshness_objective_seconds)"),
    _m("freshness", "urbpipe_subscription_idle", "gauge", KEY,
       "1 while the replicator's STAT/SUBS answered since the key's last data and no gap is "
       "open: nothing was sent, old data is not late (idle, not behind)"),
    _m("gaps", "urbpipe_gaps_open", "gauge", (*KEY, "state"),
       "open gaps by state (open, requested) after the key's newest call"),
    _m("gaps", "urbpipe_gaps_oldest_open_age_seconds", "gauge", KEY,
       "age of the key's oldest open gap when Prometheus scrapes (0: none open)"),
    _m("gaps", "urbpipe_gap_transitions_total", "counter", (*KEY, "state"),
       "gap transitions since the job started: open, requested, filled, unrecoverable "
       "(lost transactions), filled_late, lost (a hole in URBHMSNR)"),
    _m("gaps", "urbpipe_requests_outstanding", "gauge", (*KEY, "kind"),
       "requests asked and not answered: TRAN (tsnrs of requested gaps), INST (tracked "
       "initial-state requests)"),
    _m("gaps", "urbpipe_requests_total", "counter", (*KEY, "kind"),
       "requests sent to the replicator (TRAN, INST, STAT) since the job started"),
    _m("gaps", "urbpipe_storm_breaker_tripped", "gauge", KEY,
       "1 while the key's storm breaker has stopped its requests (urbpipe gaps resume)"),
    _m("alerts", "urbpipe_alerts_total", "counter", ("kind", "severity"),
       "alerts the job sent (topics.alerts, the alerts table) since it started"),
    _m("quarantine", "urbpipe_quarantine_rows_total", "counter", ("source",),
       "rows quarantined since the job started, by source (decode, decode_warning, "
       "reassembly, gfft, payload)"),
    _m("files", "urbpipe_file_stale", "gauge", ("dbid", "fnr"),
       "1 while the file's typed tables are stale (file_status: a load, a lost utility …)"),
    _m("files", "urbpipe_typed_file_seconds", "gauge", RECONCILE_FILE,
       "the file's typed landing in the newest batch that had its records (wall time: in its "
       "task with the direct typed writer, on the driver the Spark way)"),
    _m("files", "urbpipe_typed_rows_copied", "gauge", RECONCILE_FILE,
       "unchanged rows the file's current and history commits copied into new files in the "
       "newest batch that had its records (copy-on-write: grows with the tables, not the "
       "batch; the Spark way, the MERGEs' numTargetRowsCopied)"),
    _m("state", "urbpipe_batch_state_rows", "gauge", (), "rows in the state store"),
    _m("state", "urbpipe_batch_state_memory_bytes", "gauge", (), "state store memory"),
    _m("state", "urbpipe_batch_open_gaps", "gauge", (), "open gaps over all keys"),
    _m("tables", "urbpipe_table_files", "gauge", ("table",),
       "data files of a table (the file watch, maintenance.watch_minutes, or after the job "
       "compacted it)"),
    _m("tables", "urbpipe_delta_log_commits", "gauge", ("table",),
       "commit files in the table's _delta_log (the file watch): Delta lists them at every "
       "commit"),
    _m("maintenance", "urbpipe_maintenance_rounds_total", "counter", (),
       "in-job maintenance rounds finished since the job started"),
    _m("maintenance", "urbpipe_maintenance_skipped_total", "counter", (),
       "tables whose in-job compaction was skipped (a concurrent commit won, an error)"),
    _m("maintenance", "urbpipe_maintenance_last_round_timestamp_seconds", "gauge", (),
       "when the last in-job maintenance round ended (the job's start before the first); "
       "only with maintenance.every_minutes"),
    _m("maintenance", "urbpipe_maintenance_round_seconds", "gauge", (),
       "how long the last in-job maintenance round took"),
    _m("maintenance", "urbpipe_maintenance_interval_seconds", "gauge", (),
       "maintenance.every_minutes in seconds (only when set)"),
    _m("reconcile", "urbpipe_reconcile_rounds_total", "counter", (),
       "in-job reconciliation rounds finished (reconcile.every_minutes) since the job started"),
    _m("reconcile", "urbpipe_reconcile_last_round_timestamp_seconds", "gauge", (),
       "when the last in-job reconciliation round ended"),
    _m("reconcile", "urbpipe_reconcile_isns_total", "counter", (*RECONCILE_FILE, "verdict"),
       "ISNs the in-job rounds compared with Adabas, by verdict (match, differs, "
       "missing_in_lake, extra_in_lake, unanswered)"),
    _m("reconcile", "urbpipe_reconcile_repaired_total", "counter", RECONCILE_FILE,
       "drifted rows the in-job rounds saw repaired by the job's landing of the answers"),
    _m("reconcile", "urbpipe_reconcile_verified_through_timestamp_seconds", "gauge",
       RECONCILE_FILE, "the file's verified_through: every ISN compared and found equal (or "
       "repaired) up to this time, by the last full round that proved it"),
)
BY_NAME = {m.name: m for m in CATALOG}


@dataclass
class JobView:
    """The job as its metrics show it, built record by record (``observe``)."""

    started: float
    objective_s: float
    maintenance_every_s: float | None = None
    scalars: dict[str, float] = field(default_factory=dict)
    series: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    #: per key: oldest open gap (Unix ms); per file: newest commit (Unix s)
    oldest_gap_ms: dict[tuple[str, ...], int | None] = field(default_factory=dict)
    commits: dict[tuple[str, ...], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Counters at 0 and the batch's end at the start, so rules have data at once."""
        self.scalars.update({"urbpipe_batch_end_timestamp_seconds": self.started,
                             "urbpipe_batches_total": 0, "urbpipe_messages_total": 0,
                             "urbpipe_bytes_total": 0, "urbpipe_records_total": 0,
                             "urbpipe_maintenance_rounds_total": 0,
                             "urbpipe_maintenance_skipped_total": 0})
        if self.maintenance_every_s:
            self.scalars["urbpipe_maintenance_last_round_timestamp_seconds"] = self.started
        for source in QUARANTINE_SOURCES:
            self.add("urbpipe_quarantine_rows_total", (source,), 0)

    def set(self, name: str, labels: tuple[str, ...], value: float) -> None:
        self.series.setdefault(name, {})[labels] = float(value)

    def add(self, name: str, labels: tuple[str, ...], value: float) -> None:
        have = self.series.setdefault(name, {})
        have[labels] = have.get(labels, 0.0) + max(0.0, float(value))


def job_view(settings: Settings, started: float | None = None,
             stale: Mapping[tuple[int, int], bool] | None = None) -> JobView:
    """The view at start: counters at 0 for every configured key, quarantine source and
    request kind; ``stale``: each file's staleness as the lake knows it (file_status)."""
    every = settings.maintenance.every_minutes
    view = JobView(started or time.time(), settings.stream.freshness_objective_seconds,
                   every * 60 if every else None)
    if settings.reconcile.every_minutes is not None:  # in-job rounds: counted from 0
        view.scalars["urbpipe_reconcile_rounds_total"] = 0
    for key in sorted({(d, s.name) for s in settings.subscriptions for d in s.destinations}):
        _key_defaults(view, key)
    for (dbid, fnr), is_stale in (stale or {}).items():
        view.set("urbpipe_file_stale", (str(dbid), str(fnr)), int(is_stale))
    return view


def _key_defaults(view: JobView, key: tuple[str, ...]) -> None:
    """A key's series at 0, so its rules and panels have data before anything happens."""
    for name in ("urbpipe_transactions_total", "urbpipe_duplicates_total"):
        view.add(name, key, 0)
    for state in GAP_TRANSITIONS:
        view.add("urbpipe_gap_transitions_total", (*key, state), 0)
    for kind in REQUEST_KINDS:
        view.add("urbpipe_requests_total", (*key, kind), 0)
    for state in OPEN_GAP_STATES:
        view.series.setdefault("urbpipe_gaps_open", {}).setdefault((*key, state), 0.0)
    for kind in ("TRAN", "INST"):
        view.series.setdefault("urbpipe_requests_outstanding", {}).setdefault((*key, kind), 0)
    view.series.setdefault("urbpipe_storm_breaker_tripped", {}).setdefault(key, 0.0)
    view.series.setdefault("urbpipe_subscription_idle", {}).setdefault(key, 0.0)
    view.oldest_gap_ms.setdefault(key, None)


def observe(view: JobView, record: Mapping[str, Any]) -> None:
    """One batch record (``pipeline.ops.metrics.batch_record``) into the view."""
    s = view.scalars
    s.update({"urbpipe_batch_end_timestamp_seconds": record.get("recorded_at") or time.time(),
              "urbpipe_batch_last_batch_id": record["batch_id"],
              "urbpipe_batch_duration_seconds": record["duration_ms"] / 1000,
              "urbpipe_batch_messages": record["messages"],
              "urbpipe_batch_processed_rows_per_second": record.get("processed_rows_per_s") or 0,
              "urbpipe_batch_state_rows": record["state_rows"],
              "urbpipe_batch_state_memory_bytes": record["state_memory_bytes"],
              "urbpipe_batch_open_gaps": record.get("open_gaps", 0)})
    s["urbpipe_batches_total"] += 1
    for name in ("messages", "bytes", "records"):
        s[f"urbpipe_{name}_total"] += max(0, int(record.get(name) or 0))
    counts = record.get("counts") or {}
    for phase in PHASES:
        if f"t_{phase}_ms" in counts:
            view.set("urbpipe_batch_phase_seconds", (phase,), counts[f"t_{phase}_ms"] / 1000)
    for topic, lag in (record.get("input_lag") or {}).items():
        view.set("urbpipe_input_lag_messages", (topic,), lag)
    for leg, values in (record.get("latency_s") or {}).items():
        for q in ("p50", "p99"):
            view.set("urbpipe_latency_seconds", (leg, q), values[q])
    for key in record.get("keys") or ():
        _observe_key(view, key)
    _observe_counts(view, counts)


def _observe_key(view: JobView, row: Mapping[str, Any]) -> None:
    key = (row["destination"], row["subscription"])
    _key_defaults(view, key)
    view.add("urbpipe_transactions_total", key, row.get("transactions", 0))
    view.add("urbpipe_duplicates_total", key, row.get("duplicates", 0))
    for state, n in (row.get("gap_rows") or {}).items():
        view.add("urbpipe_gap_transitions_total", (*key, state), n)
    for kind, n in (row.get("request_kinds") or {}).items():
        view.add("urbpipe_requests_total", (*key, kind), n)
    for kind_severity, n in (row.get("alert_kinds") or {}).items():
        kind, _, severity = kind_severity.partition("|")
        view.add("urbpipe_alerts_total", (kind, severity), n)
    for source, n in (row.get("quarantine_sources") or {}).items():
        view.add("urbpipe_quarantine_rows_total", (source,), n)
    states = row.get("gap_states") or {}
    for state in {*OPEN_GAP_STATES, *states}:
        view.set("urbpipe_gaps_open", (*key, state), states.get(state, 0))
    outstanding = row.get("outstanding") or {}
    for kind in {"TRAN", "INST", *outstanding}:
        view.set("urbpipe_requests_outstanding", (*key, kind), outstanding.get(kind, 0))
    view.set("urbpipe_storm_breaker_tripped", key, row.get("storm", 0))
    view.set("urbpipe_subscription_idle", key, row.get("idle", 0))
    view.oldest_gap_ms[key] = row.get("oldest_gap_ms")
    for name, commit_us in (row.get("file_commits_us") or {}).items():
        dbid, _, fnr = name.partition("/")
        labels = (*key, dbid, fnr)
        view.commits[labels] = max(view.commits.get(labels, 0.0), commit_us / 1e6)
        view.series.setdefault("urbpipe_file_stale", {}).setdefault((dbid, fnr), 0.0)


#: A file's typed cost counts (``stage.file_cost``: ``<prefix>:<subscription>/<dbid>/<fnr>``).
_TYPED_COST = {"typed_ms": "urbpipe_typed_file_seconds",
               "typed_copied": "urbpipe_typed_rows_copied"}


def _observe_counts(view: JobView, counts: Mapping[str, Any]) -> None:
    """The batch writer's counts: the typed step's quarantined values
    (``quarantine_<changes table>``), files and log commits per table, maintenance, file
    staleness (``file_stale:<dbid>/<fnr>``), each file's typed cost (``_TYPED_COST``)."""
    for name, value in counts.items():
        prefix, _, rest = name.partition(":")
        if name.startswith("quarantine_"):
            view.add("urbpipe_quarantine_rows_total", ("payload",), value)
        elif prefix == "files":
            view.set("urbpipe_table_files", (rest,), value)
        elif prefix == "log":
            view.set("urbpipe_delta_log_commits", (rest,), value)
        elif prefix == "file_stale":
            dbid, _, fnr = rest.partition("/")
            view.set("urbpipe_file_stale", (dbid, fnr), value)
        elif prefix in _TYPED_COST:
            view.set(_TYPED_COST[prefix], tuple(rest.split("/")),
                     value / 1000 if prefix == "typed_ms" else value)
    s = view.scalars
    if "maint_last_round_at" in counts:
        s["urbpipe_maintenance_last_round_timestamp_seconds"] = counts["maint_last_round_at"]
        s["urbpipe_maintenance_round_seconds"] = counts.get("maint_round_ms", 0) / 1000
        s["urbpipe_maintenance_rounds_total"] += 1
    s["urbpipe_maintenance_skipped_total"] += max(0, int(counts.get("maint_skipped", 0)))


def observe_reconcile(view: JobView, figures: Mapping[str, Any]) -> None:
    """One in-job reconciliation round (``pipeline.ops.reconcile_schedule.summary``)."""
    s = view.scalars
    s["urbpipe_reconcile_rounds_total"] = s.get("urbpipe_reconcile_rounds_total", 0) + 1
    s["urbpipe_reconcile_last_round_timestamp_seconds"] = figures["at"]
    for f in figures["files"]:
        labels = (f["subscription"], str(f["dbid"]), str(f["fnr"]))
        for verdict in VERDICTS:
            view.add("urbpipe_reconcile_isns_total", (*labels, verdict),
                     f["verdicts"].get(verdict, 0))
        view.add("urbpipe_reconcile_repaired_total", labels, f["repaired"])
        if f["verified_through"] is not None:
            view.set("urbpipe_reconcile_verified_through_timestamp_seconds", labels,
                     f["verified_through"])


def samples(view: JobView, now: float) -> dict[str, dict[tuple[str, ...], float]]:
    """Every catalogue metric's series at ``now``: the view's, plus the ones computed now."""
    out = {name: dict(values) for name, values in view.series.items()}
    for name, value in view.scalars.items():
        out[name] = {(): value}
    out["urbpipe_start_timestamp_seconds"] = {(): view.started}
    out["urbpipe_last_commit_timestamp_seconds"] = dict(view.commits)
    out["urbpipe_freshness_seconds"] = {k: max(0.0, now - t) for k, t in view.commits.items()}
    out["urbpipe_freshness_objective_seconds"] = dict.fromkeys(view.commits, view.objective_s)
    out["urbpipe_gaps_oldest_open_age_seconds"] = {
        k: 0.0 if ms is None else max(0.0, now - ms / 1000)
        for k, ms in view.oldest_gap_ms.items()}
    if view.maintenance_every_s:
        out["urbpipe_maintenance_interval_seconds"] = {(): view.maintenance_every_s}
    return out


class ViewCollector:
    """A prometheus_client collector serving the catalogue from a view, under a lock (the
    listener bus thread writes, the HTTP server's thread reads)."""

    def __init__(self, view: JobView) -> None:
        self._view = view
        self._lock = threading.Lock()

    def update(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            observe(self._view, record)

    def reconciled(self, figures: Mapping[str, Any]) -> None:
        with self._lock:
            observe_reconcile(self._view, figures)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            found = samples(self._view, time.time())
        for metric in CATALOG:
            series = found.get(metric.name)
            if not series:
                continue
            if metric.kind == "counter":
                family = CounterMetricFamily(metric.name, metric.meaning,
                                             labels=metric.labels)
            else:
                family = GaugeMetricFamily(metric.name, metric.meaning, labels=metric.labels)
            for labels, value in sorted(series.items()):
                family.add_metric(list(labels), value)
            yield family


class PrometheusExporter:
    """The HTTP endpoint: the catalogue from a :class:`JobView`, on its own registry."""

    def __init__(self, port: int, addr: str = "127.0.0.1", view: JobView | None = None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.collector = ViewCollector(view or JobView(time.time(), 900.0))
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)  # type: ignore[arg-type]
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = int(self.server.server_port)

    def observe(self, record: Mapping[str, Any]) -> None:
        self.collector.update(record)

    def reconciled(self, figures: Mapping[str, Any]) -> None:
        self.collector.reconciled(figures)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def metrics_table() -> str:
    """docs/metrics.md: every metric of the catalogue, grouped, as a Markdown table."""
    lines = ["# Metrics the job serves", "",
             "Generated from `pipeline/ops/prometheus.py` (`CATALOG`) by "
             "`python -m pipeline.ops.monitoring write`; do not edit by hand "
             "(tests/unit/ops/test_monitoring.py keeps it equal to the catalogue and to what the "
             "endpoint serves). The endpoint: `stream.prometheus_address`:"
             "`stream.prometheus_port` (conf/README.md). Alert rules: "
             "`monitoring/prometheus/urbpipe-rules.yml`; what to do when one fires: "
             "docs/runbook.md.", "",
             "| metric | type | labels | meaning |", "|---|---|---|---|"]
    group = None
    for m in CATALOG:
        if m.group != group:
            group = m.group
            lines.append(f"| **{group}** | | | |")
        labels = ", ".join(f"`{label}`" for label in m.labels) or "–"
        lines.append(f"| `{m.name}` | {m.kind} | {labels} | {m.meaning} |")
    return "\n".join(lines) + "\n"
