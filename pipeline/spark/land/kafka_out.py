"""Requests to the replicator and alerts to operators: the driver's Kafka producer and the
landing step that sends a batch's ``requests`` and ``alerts`` rows.

Kafka sends come after the Delta commits and are at-least-once: a replay re-sends them, and
each carries an idempotency key (Kafka key and header) so the replicator's side and alert
consumers can drop repeats. With ``alertmanager.url`` the alerts are also posted to
Alertmanager (``pipeline.alertmanager``: fired, and resolved when a gap fills).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pipeline.alertmanager import AlertmanagerOut
from pipeline.config import Settings
from pipeline.errors import KafkaRefused
from pipeline.kafka_refusal import ClientErrors
from pipeline.reassembly.outbound import RequestForm, request_messages
from pipeline.spark.land.batch_writer import LandedBatch

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
                             alerts: list[dict[str, Any]]) -> None:
    """Requests to the replicator's input topic (``pipeline.reassembly.outbound``: an INST
    request's rows are one message), then the alerts; both carry their idempotency key."""
    for msg in request_messages(requests, request_form(settings)):
        first = msg.rows[0]
        if msg.value is None:  # the codec refused it: report, never stop the job
            log.error(json.dumps({"event": "request_not_sent", "idempotency_key": msg.key,
                                  "request": msg.kind, "reason": msg.error}))
            continue
        out.send(settings.topics.requests, first["subscription"], msg.value,
                 {"idempotency_key": msg.key, "request": msg.kind})
        log.info(json.dumps({"event": f"{msg.kind.lower()}_request",
                             **{k: first.get(k) for k in _LOGGED if first.get(k) is not None},
                             **({"files": {str(r["fnr"]): len(r["isns"]) for r in msg.rows}}
                                if msg.kind == "INST" else {})}))
    for alert in alerts:
        if isinstance(alert.get("details"), str):  # a JSON string column in Delta
            alert = {**alert, "details": json.loads(alert["details"])}
        body = json.dumps(alert, sort_keys=True, default=str).encode()
        out.send(settings.topics.alerts, alert["idempotency_key"], body,
                 {"idempotency_key": alert["idempotency_key"], "kind": alert["kind"]})
        log.warning(json.dumps({"event": "alert", **alert}, default=str))
    out.flush()
    out.page(alerts)


class RequestsAndAlerts:
    """Landing step: the batch's requests to the replicator's input topic, then its alerts
    (after the Delta commits of the steps before it). Its producer connects when the step is
    made, at start (see ``KafkaOut.connect``)."""

    lap = "t_kafka_ms"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._out = KafkaOut(settings)
        self._out.connect()

    def land(self, batch: LandedBatch) -> dict[str, int]:
        requests = batch.collect("requests") if batch.counts.get("requests") else []
        alerts = batch.collect("alerts") if batch.counts.get("alerts") else []
        if requests or alerts:
            send_requests_and_alerts(self._settings, self._out, requests, alerts)
        else:
            self._out.page([])  # what Alertmanager could not take before, if anything
        return {}
