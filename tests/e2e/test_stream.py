"""The streaming job end to end: real KRaft broker, real Spark, real Delta, driven by the simulator.

Each scenario runs the job once (module-scoped fixtures) and several tests assert on what landed,
checked against what the simulator generated. Table contents are compared with chispa.
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from chispa import assert_df_equality
from confluent_kafka import Consumer, Producer

from tests.e2e.scenario import Scenario

COLOR_EBCDIC = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE_ASCII = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11],
                  "ebcdic": False}


def _keys(spark, scenario: Scenario):
    return scenario.table(spark, "transactions").select(
        "subscription", "destination", "tsnr", "record_count")


def _read_topic(settings, topic: str, expect_at_least: int) -> list[dict]:
    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"t-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[dict] = []
    for _ in range(40):
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                out.append(json.loads(msg.value()))
        if len(out) >= expect_at_least:
            break
    consumer.close()
    return out


# -- a clean stream, transactions continued across many messages, both forms ---------------

@pytest.fixture(scope="module")
def clean(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    # Kafka's offset range split into tasks of 16 records (stream.source_records_per_task),
    # decoded in parallel: the state stage must put each key's rows back in offset order.
    scenario = Scenario.build(tmp_path_factory.mktemp("clean"), "clean", transactions=60,
                              seed=11, max_message_size=700,
                              subscriptions=[COLOR_EBCDIC, EMPLOYEE_ASCII],
                              stream={"source_records_per_task": 16})
    scenario.run(spark)
    return scenario


def test_clean_stream_lands_every_transaction_once(spark, clean: Scenario) -> None:
    expected = spark.createDataFrame(
        sorted(clean.truth()), "subscription string, destination string, tsnr bigint, "
        "record_count int")
    # the lake's columns carry their comments (issue 38): data compared, not metadata
    assert_df_equality(_keys(spark, clean), expected, ignore_row_order=True,
                       ignore_nullable=True, ignore_metadata=True)


def test_clean_stream_records_and_images_match_the_source(spark, clean: Scenario) -> None:
    images = {(r.subscription, r.tsnr, r.rsnr, r.dsnr, r.image_type, bytes(r.payload))
              for r in clean.table(spark, "images").collect()}
    expected = {(s.subscription, s.tsnr, rsnr, dsnr, typ, payload)
                for s in clean.sent for rsnr, dsnr, typ, payload in s.images()}
    assert images == expected
    records = {(r.subscription, r.tsnr, r.rsnr, r.fnr, r.isn, r.type)
               for r in clean.table(spark, "records").collect()}
    assert records == {(s.subscription, s.tsnr, *rec) for s in clean.sent for rec in s.records()}


def test_clean_stream_used_continuations_and_left_nothing_behind(spark, clean: Scenario) -> None:
    txs = clean.table(spark, "transactions")
    continued = txs.where("first_offset != last_offset").count()
    assert continued >= 5, "max_message_size 700 must split transactions across messages"
    assert {r.origin for r in txs.select("origin").distinct().collect()} == {"live"}
    for empty in ("gaps", "quarantine", "duplicates", "requests"):
        assert clean.table(spark, empty).count() == 0, empty


# -- faults: lost transactions and continuations, duplicates, restart, poison ---------------

POISON = b"\x00\x01 definitely not a replicator message"


@pytest.fixture(scope="module")
def faulty(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario.build(
        tmp_path_factory.mktemp("faulty"), "faulty", transactions=80, seed=5,
        max_message_size=1500, subscriptions=[COLOR_EBCDIC, EMPLOYEE_ASCII],
        faults={"drop_transaction": 2, "duplicate": 2, "drop_continuation": 1, "corrupt": 1},
        gaps={"retry_initial_ms": 3000, "max_retries": 3},
        stream={"source_records_per_task": 16})  # split source tasks, as in ``clean``
    producer = Producer(scenario.settings.kafka.confluent())
    topic = next(iter(scenario.settings.topics.outputs))
    producer.produce(topic, key=b"COLOR", value=POISON)
    assert producer.flush(30) == 0
    scenario.run(spark)
    return scenario


def test_gaps_are_requested_and_filled_by_resends(spark, faulty: Scenario) -> None:
    every = faulty.latest_gaps(spark)
    gaps = [g for g in every if g["kind"] == "tsnr"]
    assert gaps, "dropped transactions must open gaps"
    # the dropped messages are holes in the destination's message numbers too (warnings)
    assert {g["state"] for g in every if g["kind"] == "messages"} == {"lost"}
    assert {g["state"] for g in gaps} == {"filled"}, gaps
    requests = faulty.table(spark, "requests").count()
    assert requests >= len(gaps)
    resent = faulty.table(spark, "transactions").where("origin = 'resend'")
    assert resent.count() >= 2
    after_images = faulty.table(spark, "images").join(
        resent.select("subscription", "destination", "epoch", "tsnr"),
        ["subscription", "destination", "epoch", "tsnr"]).where("image_type = 'A'")
    assert after_images.count() == 0, "the resend buffer never keeps after images"


def test_metrics_count_input_bytes_and_track_open_gaps(faulty: Scenario) -> None:
    records = faulty.metrics()
    # every generated message (and the poison one, and the replies) was read and counted once
    assert sum(r["bytes"] for r in records) >= faulty.sent_bytes + len(POISON) > len(POISON)
    assert max(r["open_gaps"] for r in records) >= 1, "dropped transactions opened gaps"
    assert records[-1]["open_gaps"] == 0, "every gap was filled by the end"


def test_metrics_time_every_landed_transaction_and_count_it_per_key(faulty: Scenario) -> None:
    """The state calls' packed times reach the driver whole: each batch's latency legs count
    every transaction it landed, and so do its keys."""
    landing = [r for r in faulty.metrics() if r["transactions"]]
    assert landing
    for record in landing:
        legs = record["latency_s"]
        assert legs["commit_to_landed"]["count"] == record["transactions"]
        assert legs["commit_to_landed"]["p50"] > 0
        assert sum(k.get("transactions", 0) for k in record["keys"]) == record["transactions"]


def test_faulty_stream_lands_each_transaction_exactly_once(spark, faulty: Scenario) -> None:
    txs = faulty.table(spark, "transactions")
    keys = txs.select("subscription", "destination", "epoch", "tsnr")
    assert keys.count() == keys.distinct().count()
    landed = {(r.subscription, r.destination, r.tsnr, r.record_count)
              for r in _keys(spark, faulty).collect()}
    # Everything generated landed, whole, except transactions whose only trace was lost with
    # a continuation AND could not be resent (none in this seed: all gaps filled).
    assert landed == faulty.truth()
    assert faulty.table(spark, "duplicates").count() >= 2


def test_poison_and_corrupt_messages_are_quarantined_with_their_bytes(spark,
                                                                      faulty: Scenario) -> None:
    rows = faulty.table(spark, "quarantine").collect()
    poison = [r for r in rows if r.raw is not None and bytes(r.raw) == POISON]
    assert len(poison) == 1
    assert poison[0].source == "decode" and "eye-catcher" in poison[0].reason
    assert poison[0].topic == next(iter(faulty.settings.topics.outputs))
    assert len(rows) >= 2, "the simulator's corrupted message is quarantined too"


def test_alerts_reach_the_alerts_topic_with_idempotency_keys(spark, faulty: Scenario) -> None:
    landed = faulty.table(spark, "alerts").collect()
    kinds = {r.kind for r in landed}
    assert {"gap_open", "gap_requested", "gap_filled", "lost_continuation"} <= kinds
    sent = _read_topic(faulty.settings, faulty.settings.topics.alerts, len(landed))
    assert {a["idempotency_key"] for a in sent} == {r.idempotency_key for r in landed}


# -- a replicator restart, and a gap the replicator cannot close ---------------------------

@pytest.fixture(scope="module")
def restarted(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory,
              ) -> Scenario:
    no_buffer = {**COLOR_EBCDIC, "resend_buffer": False}
    scenario = Scenario.build(tmp_path_factory.mktemp("restart"), "restart", transactions=60,
                              seed=3, subscriptions=[no_buffer, EMPLOYEE_ASCII],
                              faults={"restart": 1, "drop_transaction": 2},
                              gaps={"retry_initial_ms": 3000, "max_retries": 2})
    scenario.run(spark)
    return scenario


def test_restart_begins_a_new_epoch_without_a_false_gap(spark, restarted: Scenario) -> None:
    epochs = {(r.subscription, r.epoch) for r in
              restarted.table(spark, "transactions").select("subscription", "epoch").collect()}
    # The STRT at the start begins epoch 1 (its echo reaches every subscription); the
    # simulator's numbering goes back to 1 at the restart: one more epoch per subscription
    # that sent transactions both before and after it.
    expected: set[tuple[str, int]] = set()
    for sub in {s.subscription for s in restarted.sent}:
        tsnrs = [s.tsnr for s in restarted.sent if s.subscription == sub]
        restarts = sum(1 for a, b in pairwise(tsnrs) if b < a)
        expected |= {(sub, e + 1) for e in range(restarts + 1)}
    assert epochs == expected
    assert any(e == 2 for _, e in expected), "the restart must fall inside the stream"
    for gap in restarted.latest_gaps(spark, kind="tsnr"):
        assert "restart" not in gap["reason"] or gap["state"] == "unrecoverable"
    kinds = {r.kind for r in restarted.table(spark, "alerts").collect()}
    assert "replicator_restart" in kinds


def test_gap_without_resend_buffer_is_unrecoverable_and_alerted(spark,
                                                                restarted: Scenario) -> None:
    color = [g for g in restarted.latest_gaps(spark) if g["subscription"] == "COLOR"
             and "restart" not in g["reason"]]
    assert color, "a dropped COLOR transaction must open a gap"
    assert {g["state"] for g in color} == {"unrecoverable"}
    trsp = restarted.table(spark, "status_events").where(
        "st = 'TRSP' AND rsp = 131 AND subc = 34").count()
    assert trsp >= 1
    critical = [a for a in _read_topic(restarted.settings, restarted.settings.topics.alerts, 1)
                if a["kind"] == "gap_unrecoverable" and a["subscription"] == "COLOR"]
    assert critical and critical[0]["severity"] == "critical"

