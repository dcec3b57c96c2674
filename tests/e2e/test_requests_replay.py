"""A replayed batch sends no request (nor alert) the lake shows it sent (issue 35, point 9):
the batch writer's Kafka step on the real broker and Delta, run twice with one batch id, the
way Spark replays a batch after a crash between the Kafka send and the checkpoint commit."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from pipeline.spark.land.batch_writer import LandedBatch, PhaseClock, batch_writer, count_tables
from pipeline.spark.land.catalog import ensure_schema
from pipeline.spark.land.dictionary import column_doc
from pipeline.spark.land.kafka_out import RequestsAndAlerts
from pipeline.spark.land.ledger import CommitLedger
from pipeline.spark.land.tables import OUTPUT_DDL, SENT_TABLE, table_path
from tests.e2e.scenario import scenario_settings

APP = "replay-test"


def _tran(tsnr: int) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "token": "URBPIPE", "reply_destination": "REPLY", "attempt": 1,
            "gap_id": "COLOR-1-5", "requested_at": "2026-01-01T00:00:00+00:00",
            "idempotency_key": f"COLOR/OUT1/1/{tsnr}/1", "kind": "TRAN"}


def _inst(fnr: int) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1,
            "idempotency_key": "inst:COLOR:7", "kind": "INST", "initial_state": "ICOLOR",
            "dbid": 10006, "fnr": fnr, "isns": [3, 5], "request_id": "inst:7",
            "token": "URBPIPE1", "reply_destination": "REPLY"}


ALERT = {"idempotency_key": "alert:gap:COLOR-1-5", "kind": "gap_opened", "severity": "warning",
         "subscription": "COLOR", "destination": "OUT1", "epoch": 1, "message": "gap",
         "at": "2026-01-01T00:00:00+00:00", "at_ms": 0, "details": "{}"}


def _batch_frame(spark):
    rows = [("requests", json.dumps(r), None) for r in (_tran(5), _tran(6), _inst(4))]
    rows.append(("alerts", json.dumps(ALERT), None))
    return spark.createDataFrame(rows, OUTPUT_DDL)


def _keys_on(settings, topic: str, expect: int, timeout_s: float = 20.0) -> Counter:
    """Idempotency keys of every message on ``topic`` (read from the start): until
    ``expect`` arrived, then a second more for any repeat to show."""
    from confluent_kafka import Consumer

    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"check-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.partition.eof": False})
    consumer.subscribe([topic])
    keys: Counter = Counter()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=100, timeout=0.5):
                if m.error() is None:
                    keys[dict(m.headers() or [])["idempotency_key"].decode()] += 1
            if sum(keys.values()) >= expect:
                deadline = min(deadline, time.monotonic() + 1)
    finally:
        consumer.close()
    return keys


def test_a_replayed_batch_sends_each_request_and_alert_once(spark, kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    settings, _ = scenario_settings(tmp_path, "replay")
    # with a catalog (issue 38): kafka_sent, made by the first send, is named at once
    settings = settings.model_copy(update={"catalog": settings.catalog.model_copy(
        update={"enabled": True, "schema_name": "replay_test"})})
    ensure_schema(spark, settings)
    write = batch_writer(settings, APP, [RequestsAndAlerts(settings)])
    frame = _batch_frame(spark)
    write(frame, 0)   # the batch: sent, then recorded in kafka_sent
    write(frame, 0)   # the same batch replayed (the checkpoint never committed it)
    requests = _keys_on(settings, settings.topics.requests, expect=3)
    assert requests == {"COLOR/OUT1/1/5/1": 1, "COLOR/OUT1/1/6/1": 1, "inst:COLOR:7": 1}
    alerts = _keys_on(settings, settings.topics.alerts, expect=1, timeout_s=5)
    assert alerts == {"alert:gap:COLOR-1-5": 1}
    path = table_path(settings, SENT_TABLE)
    named = spark.table(f"replay_test.{SENT_TABLE}")
    assert named.count() == 4, "named in the catalog"
    assert {f.name: f.metadata.get("comment") for f in named.schema.fields} == {
        f.name: column_doc(SENT_TABLE, f.name).comment() for f in named.schema.fields}, (
        "its columns' comments came with its first append")
    sent = spark.read.format("delta").load(path).collect()
    assert sorted((r.idempotency_key, r.kind, r.batch_id, r.app_id) for r in sent) == sorted(
        [("COLOR/OUT1/1/5/1", "TRAN", 0, APP), ("COLOR/OUT1/1/6/1", "TRAN", 0, APP),
         ("inst:COLOR:7", "INST", 0, APP), ("alert:gap:COLOR-1-5", "gap_opened", 0, APP)])

    # the log cannot tell (untagged commits on top): the keys are read back instead
    other = spark.read.format("delta").load(path).limit(1).selectExpr(
        "* except (app_id)", "'someone-else' as app_id")
    for _ in range(2):
        other.write.format("delta").mode("append").save(path)
    blind = CommitLedger(spark, APP, max_scan=1)
    assert blind.landed(path, 0) is None
    counts = count_tables(frame)[0]
    batch = LandedBatch(frame, 0, APP, counts, [], [], blind, PhaseClock(0.0), dict(counts))
    assert RequestsAndAlerts(settings).land(batch) == {"kafka_sent": 0}

    # skipping is per batch: the next batch's request (a retry of tsnr 5) goes out
    retry = {**_tran(5), "attempt": 2, "idempotency_key": "COLOR/OUT1/1/5/2"}
    write(spark.createDataFrame([("requests", json.dumps(retry), None)], OUTPUT_DDL), 1)
    assert _keys_on(settings, settings.topics.requests, expect=4) == {**requests,
                                                                     "COLOR/OUT1/1/5/2": 1}
