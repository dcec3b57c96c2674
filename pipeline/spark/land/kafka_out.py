"""Requests to the replicator and alerts to operators: the driver's Kafka producer and the
landing step that sends a batch's ``requests`` and ``alerts`` rows.

Kafka sends come after the Delta commits. Each message carries an idempotency key (Kafka key
and header), but nothing in seed 000 lets the replicator drop a repeated request (URBI
carries a fixed token only), so the job itself never sends a batch's messages twice: right
after the producer's flush it appends one ``kafka_sent`` row per message, tagged with the
batch (``pipeline.spark.land.ledger``), and a batch replayed after a crash between the send
and Spark's checkpoint commit finds them there and sends nothing again. What remains
at-least-once is the narrow window between the flush and that append (a crash there sends the
batch's messages once more). With ``alertmanager.url`` the alerts are also posted to
Alertmanager (``pipeline.alertmanager``: fired, and resolved when a gap fills).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from pipeline.alertmanager import AlertmanagerOut
from pipeline.config import Settings
from pipeline.errors import KafkaRefused
from pipeline.kafka_refusal import ClientErrors
from pipeline.reassembly.outbound import RequestForm, request_messages
from pipeline.spark.land import catalog
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.comments import commented
from pipeline.spark.land.dictionary import comments
from pipeline.spark.land.tables import SENT_DDL, SENT_TABLE, table_path
from pipeline.spark.land.writes import write_once

log = logging.getLogger("urbpipe.sink")


class KafkaUnreachable(RuntimeError):
    """The job's producer could not reach Kafka at start."""


class KafkaOut:
    """Producer for requests and alerts, on the driver."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: Any = None
        self._errors = ClientErrors()  # librdkafka's error_cb: why a first contact failed
        self._pager = AlertmanagerOut(settings) if settings.alertmanager.url else None

    def connect(self, timeout_s: float = 30.0) -> None:
        """Create the producer and fetch the cluster's metadata: the job finds out at start,
        in one line, that Kafka is out of reach, and its first batch need not connect."""
        from confluent_kafka import KafkaException

        try:
            self._ensure().list_topics(timeout=timeout_s)
        except KafkaException as exc:
            self._producer.poll(0.5)  # librdkafka serves error_cb (the SASL/TLS errors) here
            refusal = self._errors.refusal(self._settings.kafka, *exc.args)
            if refusal is not None:  # a wrong password is not "cannot reach"
                raise KafkaRefused(refusal.message) from None
            raise KafkaUnreachable(
                f"cannot reach Kafka at {self._settings.kafka.bootstrap_servers} within "
                f"{timeout_s:g} s: {exc.args[0] if exc.args else exc}") from None

    def send(self, topic: str, key: str, value: bytes, headers: dict[str, str]) -> None:
        self._ensure().produce(topic, key=key.encode(), value=value,
                               headers=list(headers.items()))

    def _ensure(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            quiet = logging.getLogger("urbpipe.kafka.producer")
            quiet.setLevel(logging.ERROR)  # librdkafka's transient coordinator chatter
            self._producer = Producer({**self._settings.kafka.confluent(),
                                       "enable.idempotence": "true", "linger.ms": "5",
                                       "error_cb": self._errors}, logger=quiet)
        return self._producer

    def flush(self) -> None:
        if self._producer is not None and self._producer.flush(30) > 0:
            raise RuntimeError("Kafka did not acknowledge all requests/alerts within 30s")

    def page(self, alerts: list[dict[str, Any]]) -> None:
        """The alerts to Alertmanager, if conf names one (with any it could not take before);
        never raises."""
        if self._pager is not None:
            self._pager.send(alerts)


def request_form(settings: Settings) -> RequestForm:
    rep = settings.replicator
    return RequestForm(rep.reply_destination, rep.request_token, rep.ebcdic, rep.big_endian,
                       rep.codepage)


_LOGGED = ("subscription", "destination", "epoch", "tsnr", "attempt", "request_id",
           "initial_state", "dbid", "idempotency_key")


def send_requests_and_alerts(settings: Settings, out: KafkaOut, requests: list[dict[str, Any]],
                             alerts: list[dict[str, Any]], *,
                             sent: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Requests to the replicator's input topic (``pipeline.reassembly.outbound``: an INST
    request's rows are one message), then the alerts; both carry their idempotency key. None
    whose key is in ``sent`` (sent before: a replayed batch). Returns a ``kafka_sent`` row
    per message sent, once the producer has flushed them."""
    done: list[dict[str, Any]] = []
    for msg in request_messages(requests, request_form(settings)):
        first = msg.rows[0]
        if msg.key in sent:
            continue
        if msg.value is None:  # the codec refused it: report, never stop the job
            log.error(json.dumps({"event": "request_not_sent", "idempotency_key": msg.key,
                                  "request": msg.kind, "reason": msg.error}))
            continue
        out.send(settings.topics.requests, first["subscription"], msg.value,
                 {"idempotency_key": msg.key, "request": msg.kind})
        done.append(_sent(msg.key, settings.topics.requests, msg.kind, first))
        log.info(json.dumps({"event": f"{msg.kind.lower()}_request",
                             **{k: first.get(k) for k in _LOGGED if first.get(k) is not None},
                             **({"files": {str(r["fnr"]): len(r["isns"]) for r in msg.rows}}
                                if msg.kind == "INST" else {})}))
    for alert in alerts:
        if alert["idempotency_key"] in sent:
            continue
        if isinstance(alert.get("details"), str):  # a JSON string column in Delta
            alert = {**alert, "details": json.loads(alert["details"])}
        body = json.dumps(alert, sort_keys=True, default=str).encode()
        out.send(settings.topics.alerts, alert["idempotency_key"], body,
                 {"idempotency_key": alert["idempotency_key"], "kind": alert["kind"]})
        done.append(_sent(alert["idempotency_key"], settings.topics.alerts, alert["kind"], alert))
        log.warning(json.dumps({"event": "alert", **alert}, default=str))
    out.flush()
    out.page([a for a in alerts if a["idempotency_key"] not in sent])
    return done


def _sent(key: str, topic: str, kind: str, row: dict[str, Any]) -> dict[str, Any]:
    return {"idempotency_key": key, "topic": topic, "kind": kind,
            "subscription": row.get("subscription"), "destination": row.get("destination"),
            "sent_at": datetime.now(UTC)}


class RequestsAndAlerts:
    """Landing step: the batch's requests to the replicator's input topic, then its alerts
    (after the Delta commits of the steps before it), then what it sent to ``kafka_sent``;
    a replayed batch sends only what that table does not show sent (module docstring). Its
    producer connects when the step is made, at start (see ``KafkaOut.connect``)."""

    lap = "t_kafka_ms"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._out = KafkaOut(settings)
        self._out.connect()
        # kafka_sent is made by the first send, after the start named every table: named
        # in the catalog at this run's first write (``catalog.register`` keeps a known name)
        self._named = not settings.catalog.enabled

    def land(self, batch: LandedBatch) -> dict[str, int]:
        requests = batch.collect("requests") if batch.counts.get("requests") else []
        alerts = batch.collect("alerts") if batch.counts.get("alerts") else []
        if not (requests or alerts):
            self._out.page([])  # what Alertmanager could not take before, if anything
            return {}
        path = table_path(self._settings, SENT_TABLE)
        landed = batch.ledger.landed(path, batch.batch_id)
        if landed:  # the batch's messages were sent and recorded: a replay
            log.warning(json.dumps({"event": "kafka_sends_skipped", "batch_id": batch.batch_id,
                                    "reason": "kafka_sent shows the batch's messages sent"}))
            return {"kafka_sent_before": len(requests) + len(alerts)}
        sent = sent_keys(batch, path) if landed is None else frozenset()
        done = send_requests_and_alerts(self._settings, self._out, requests, alerts,
                                        sent=sent)
        if done:
            write_once(_sent_frame(batch, done), path, f"{batch.app_id}-{SENT_TABLE}",
                       batch.batch_id, batch.ledger)
            if not self._named:
                log.info("catalog: %s: %s", SENT_TABLE,
                         catalog.register(batch.session, self._settings, SENT_TABLE))
                self._named = True
        return {"kafka_sent": len(done)}


def sent_keys(batch: LandedBatch, path: str) -> frozenset[str]:
    """The keys ``kafka_sent`` holds for this batch of this query, read with Spark: only when
    the table's log did not tell (``CommitLedger.landed`` None: many untagged commits)."""
    from pyspark.sql import functions as F

    from pipeline.spark.land.maintenance import is_table

    spark = batch.session
    if not is_table(spark, path):
        return frozenset()
    rows = (spark.read.format("delta").load(path)
            .where((F.col("app_id") == batch.app_id) & (F.col("batch_id") == batch.batch_id))
            .select("idempotency_key").collect())
    return frozenset(r["idempotency_key"] for r in rows)


def sent_schema() -> Any:
    """``kafka_sent``'s schema with its columns' comments (the table is made by its first
    append, so the comments come with the schema)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(f"{SENT_DDL}, batch_id bigint")
    return commented(schema, comments(SENT_TABLE, schema.fieldNames()))


def _sent_frame(batch: LandedBatch, rows: list[dict[str, Any]]) -> Any:
    schema = sent_schema()
    data = [tuple({**r, "app_id": batch.app_id, "batch_id": batch.batch_id}[f.name]
                  for f in schema.fields) for r in rows]
    return batch.session.createDataFrame(data, schema)
