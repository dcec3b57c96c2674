"""Faults in the replicator's stream, with the job running in-process on the shared broker:
1% corrupted messages, replicator restarts, and a gap the replicator never answers.

Each test ends with the exactly-once check against what the simulator generated (no
transaction lost, none twice, records and images exact), every bad message in quarantine and
the alerts an operator must get, read from the alerts topic itself.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.demo import gaps_settled
from devtools.sim import FaultPlan, Replicator
from devtools.sim.live import LiveReplicator
from devtools.sim.sinks import KafkaSink
from pipeline.config import Settings
from pipeline.urb import UrbFormatError, decode_message
from tests.e2e.scenario import Scenario
from tests.faults.helpers import (
    assert_exactly_once,
    fault_settings,
    latest_gaps,
    read_table,
    read_topic,
    sim_config,
    watch,
    with_epochs,
)
from tests.faults.oncall import OnCall
from tests.support.job_run import running_job
from tests.support.truth import generate


def _decodes(value: bytes) -> bool:
    try:
        decode_message(value)
    except UrbFormatError:
        return False
    return True


def _run(spark: Any, settings: Settings, send: Callable[[], None], *,
         timeout_s: float = 300.0, observe: Callable[..., Any] | None = None) -> None:
    """Start the job in-process, send, and wait until it is idle with every gap settled."""
    from pipeline.spark.engine.drain import await_idle

    with running_job(spark, settings, observe=observe, feed=send) as query:
        await_idle(query, timeout_s=timeout_s, quiet_batches=2,
                   until=lambda: gaps_settled(settings))
        # the gaps table is written mid-batch; that batch sends its alerts to Kafka after
        # its Delta writes: let two more batches complete before stopping the query
        done = query.lastProgress["batchId"] if query.lastProgress else -1
        deadline = time.monotonic() + 120
        while (query.lastProgress or {}).get("batchId", -1) < done + 2:
            assert time.monotonic() < deadline, "the query stopped making batches"
            time.sleep(0.5)


def _alerts(settings: Settings, kinds: Counter[str]) -> list[dict[str, Any]]:
    """Alerts on the alerts topic, read until it holds at least ``kinds`` (or a timeout)."""
    def enough(msgs: list[dict[str, Any]]) -> bool:
        seen = Counter(m["kind"] for m in msgs)
        return all(seen[k] >= n for k, n in kinds.items())

    return read_topic(settings, settings.topics.alerts, until=enough, timeout_s=30)


def _details(alert: dict[str, Any]) -> dict[str, Any]:
    """An alert's details: the job sends them as a JSON string inside the JSON message."""
    details = alert["details"]
    return json.loads(details) if isinstance(details, str) else details


# -- 1% corrupted messages ----------------------------------------------------------------------

def test_one_percent_corrupted_messages_are_quarantined_and_nothing_else_is_lost(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Every corrupted message the codec rejects is in quarantine with its exact bytes (and
    no other message is); the transactions they carried come back through requested-and-filled
    gaps. A corruption the codec tolerates (damaged bytes inside an image) still lands its
    transaction whole: the only image bytes that differ from the source are the damaged
    ones, and a typed decode that fails on them is quarantined (source 'payload').
    All other transactions are exact."""
    settings, conf = fault_settings(tmp_path, "corrupt",
                                    gaps={"retry_initial_ms": 3000, "max_retries": 3})
    # a buffer that keeps the run: this test is about corruption, not the circular buffer
    rep = Replicator(sim_config(settings, 1500, big_buffer=True), 24,
                     faults=FaultPlan(rates={"corrupt": 0.01}), transactions=300)
    faults = watch(rep)
    deliveries, sent = generate(rep, 300)
    rejected = [bad for _, bad in faults.corrupted if not _decodes(bad)]
    tolerated = [bad for _, bad in faults.corrupted if _decodes(bad)]
    assert len(rejected) >= 2 and tolerated, (
        f"seed premise: 1% of 300 corrupts a few messages, some undecodable and some not: "
        f"{len(rejected)} rejected, {len(tolerated)} tolerated")

    scenario = Scenario(settings, conf, sent, LiveReplicator(settings, replicator=rep,
                                                             deliveries=deliveries))
    scenario.run(spark)

    quarantine = read_table(settings, "quarantine")
    decode = [q for q in quarantine if q["source"] == "decode"]
    raw = Counter(bytes(q["raw"]) for q in decode)
    assert raw == Counter(rejected), (
        f"quarantine must hold each undecodable corrupted message once and nothing else: "
        f"{len(decode)} rows, {len(rejected)} rejected messages, "
        f"{sum((Counter(rejected) - raw).values())} of them missing")
    assert all(q["topic"] in settings.topics.outputs and q["reason"] for q in decode)
    # a tolerated corruption may leave a trace: a skipped element (decode_warning, with the
    # message's bytes), an inconsistent transaction (reassembly) or a bad typed value (payload)
    others = [q for q in quarantine if q["source"] != "decode"]
    assert all(q["source"] in ("decode_warning", "payload", "reassembly") for q in others), [
        (q["source"], q["reason"]) for q in others]
    assert all(bytes(q["raw"]) in tolerated for q in others
               if q["source"] == "decode_warning" and q["raw"] is not None)

    gaps = latest_gaps(settings)
    assert gaps, "a lost corrupted message must open a gap"
    assert {g["state"] for g in gaps} == {"filled"}, gaps
    assert_exactly_once(settings, sent, payloads=False)
    txs = read_table(settings, "transactions", ["origin"])
    assert any(t["origin"] == "resend" for t in txs), "lost transactions come back as resends"

    damaged = {bytes(e.payload) for bad in tolerated for e in decode_message(bad).elements
               if e.eye == "URBD" and e.payload}
    source = {(s.subscription, epoch, s.tsnr, rsnr, dsnr): payload
              for epoch, s in with_epochs(sent) for rsnr, dsnr, _, payload in s.images()}
    differ = [bytes(i["payload"]) for i in read_table(settings, "images")
              if bytes(i["payload"]) != source.get((i["subscription"], i["epoch"], i["tsnr"],
                                                    i["rsnr"], i["dsnr"]), bytes(i["payload"]))]
    assert all(p in damaged for p in differ), (
        f"{len(differ)} image(s) differ from the source, not all of them damaged in transport")

    want = Counter({"gap_open": len(gaps), "gap_filled": len(gaps)})
    sent_alerts = _alerts(settings, want)
    kinds = Counter(a["kind"] for a in sent_alerts)
    assert all(kinds[k] >= n for k, n in want.items()), kinds
    landed_keys = {a["idempotency_key"] for a in read_table(settings, "alerts")}
    assert {a["idempotency_key"] for a in sent_alerts} == landed_keys


# -- replicator restarts ------------------------------------------------------------------------

def test_replicator_restarts_begin_new_epochs_with_exact_rows_per_epoch(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two abnormal ends and restarts (REST, numbering from 1, empty resend buffer): each
    begins a new epoch, with a restart alert per subscription and epoch, no false gap, and the
    rows of every epoch exact."""
    settings, conf = fault_settings(tmp_path, "restart")
    rep = Replicator(sim_config(settings, 1500), 23, faults=FaultPlan(counts={"restart": 2}),
                     transactions=90)
    faults = watch(rep)
    deliveries, sent = generate(rep, 90)
    assert len(faults.steps("restart")) == 2
    epochs: dict[str, set[int]] = defaultdict(set)
    for epoch, s in with_epochs(sent):
        epochs[s.subscription].add(epoch)
    assert all(e == {1, 2, 3} for e in epochs.values()), (
        f"seed premise: every subscription has transactions in all three epochs: {epochs}")

    scenario = Scenario(settings, conf, sent, LiveReplicator(settings, replicator=rep,
                                                             deliveries=deliveries))
    scenario.run(spark)

    assert_exactly_once(settings, sent)
    assert latest_gaps(settings) == [], "a restart is a new epoch, not a gap"
    status = Counter((r["destination"], r["st"]) for r in read_table(settings, "status_events"))
    for dest in ("OUT1", settings.replicator.reply_destination):  # lifecycle goes to both
        assert (status[(dest, "STRT")], status[(dest, "REST")]) == (1, 2), status

    want = {(sub, e) for sub, es in epochs.items() for e in es if e > 1}
    sent_alerts = _alerts(settings, Counter({"replicator_restart": len(want)}))
    restarts = {(a["subscription"], a["epoch"]) for a in sent_alerts
                if a["kind"] == "replicator_restart" and a["subscription"]}
    assert restarts == want, f"restart alerts per (subscription, epoch): {restarts} != {want}"
    assert all(a["severity"] == "warning" for a in sent_alerts
               if a["kind"] == "replicator_restart")


# -- a gap nobody answers --------------------------------------------------------------------

def test_gap_never_answered_becomes_unrecoverable_after_retries_with_critical_alert(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Transactions lost in transport, and a replicator that never answers the TRAN requests
    (the stream goes through a plain KafkaSink, nobody reads the input topic): each gap is
    requested 1 + max_retries times with backoff, then becomes unrecoverable with a critical
    alert on the alerts topic. Every other transaction lands exactly once.

    The same run is the on-call engineer's view (tests/faults/oncall.py): a real Prometheus
    scrapes the job's endpoint and evaluates every dashboard panel and rule (the run keeps
    conf/test.yaml's layouts, so the typed cost per file has data too), and a real
    Alertmanager pages each unrecoverable gap to a webhook until an operator acks it."""
    with OnCall(tmp_path) as oncall:
        _unanswered_gaps(spark, tmp_path, oncall)


def _unanswered_gaps(spark: Any, tmp_path: Path, oncall: OnCall) -> None:
    retries, initial_ms = 2, 1000
    settings, conf = fault_settings(tmp_path, "unanswered", gaps={
        "retry_initial_ms": initial_ms, "retry_multiplier": 2.0, "max_retries": retries},
        stream=oncall.stream, sections=oncall.sections, layouts=True)
    rep = Replicator(sim_config(settings, 1500), 29,
                     faults=FaultPlan(counts={"drop_transaction": 3}), transactions=60)
    faults = watch(rep)
    deliveries, sent = generate(rep, 60)
    dropped = {(sent[i].subscription, sent[i].tsnr) for i in faults.steps("drop_transaction")}
    last = {s.subscription: s.tsnr for s in sent}
    assert len(dropped) == 3 and all(t < last[sub] for sub, t in dropped), (
        f"seed premise: each dropped transaction has a later one that reveals it: {dropped}")

    def send() -> None:
        sink = KafkaSink(settings.kafka.bootstrap_servers)
        sink.send(deliveries)
        sink.close()

    _run(spark, settings, send, observe=oncall.observe)

    assert_exactly_once(settings, sent, lost=dropped)
    gaps = latest_gaps(settings)
    missing = sorted((g["subscription"], t) for g in gaps
                     for t in range(g["from_tsnr"], g["to_tsnr"] + 1))
    assert missing == sorted(dropped), f"gaps {missing} != dropped {sorted(dropped)}"
    rounds = 1 + retries
    for g in gaps:
        width = g["to_tsnr"] - g["from_tsnr"] + 1
        assert g["state"] == "unrecoverable", g
        assert "retries exhausted" in g["reason"], g
        assert g["requests_sent"] == rounds * width, g
        waited = (g["closed_at"] - g["opened_at"]).total_seconds() * 1000
        assert waited >= initial_ms * (1 + 2 + 4) * 0.99, f"gave up after {waited} ms: {g}"

    attempts = defaultdict(set)
    for r in read_table(settings, "requests"):
        attempts[(r["subscription"], r["tsnr"])].add(r["attempt"])
    assert attempts == {k: set(range(1, rounds + 1)) for k in dropped}, attempts
    on_topic = Counter()
    for value in read_topic(settings, settings.topics.requests, as_json=False, timeout_s=20,
                            until=lambda m: len(m) >= rounds * len(dropped)):
        for e in decode_message(value).elements:
            if e.eye == "URBI" and e.urbirt == "TRAN":
                on_topic[((e.urbisnam or "").strip(), e.urbitsnr)] += 1
    assert set(on_topic) == dropped and all(n >= rounds for n in on_topic.values()), on_topic

    alerts = _alerts(settings, Counter({"gap_unrecoverable": len(gaps)}))
    critical = {_details(a)["gap_id"] for a in alerts if a["kind"] == "gap_unrecoverable"}
    assert critical == {g["gap_id"] for g in gaps}, alerts
    assert all(a["severity"] == "critical" for a in alerts if a["kind"] == "gap_unrecoverable")
    statuses = {r["st"] for r in read_table(settings, "status_events")}
    assert "TRSP" not in statuses, "nobody answered, so no TRSP can have landed"
    oncall.check_prometheus()
    oncall.check_pages_until_acked(conf, [f"{g['destination']}/{g['subscription']}/"
                                          f"{g['gap_id']}" for g in gaps])
