"""The real transport end to end: what a real replicator and MQ→Kafka connector deliver,
through the real broker, Spark and Delta, with the simulator's real-world defaults (no Kafka
key, statuses without names, a TOD clock on UTC+1 with leap seconds, a circular resend
buffer).

1. a source topic with three partitions: the job refuses to start (exit 2, one line);
2. the connector re-produces batches far back: nothing lands twice, nothing is asked for;
3. STRT names no subscription: tsnrs 1-2 lost right after it are a gap, asked for, filled;
4. TRSP 131/35 for the oldest tsnrs of a gap (overwritten): the newer ones still land;
5. a transaction that arrives after its gap was settled lands (gap state filled_late).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from devtools.sim import Delivery, Replicator
from devtools.sim.model import ResendBufferDef
from devtools.sim.sinks import KafkaSink
from pipeline.urb import decode_message
from tests.e2e.scenario import ROOT, Scenario, scenario_settings
from tests.support.job_run import running_job

COLOR = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}


def tsnrs_in(d: Delivery, subscription: str) -> set[int]:
    """The tsnrs of ``subscription`` any element of the message belongs to."""
    out = set()
    for e in decode_message(d.value).elements:
        if e.eye == "URBT" and e.urbtsnam == subscription:
            out.add(e.urbttsnr)
        elif e.eye == "URBC" and e.urbcsnam == subscription:
            out.add(e.urbctsnr)
    return out


def without(deliveries: list[Delivery], subscription: str, lost: set[int]) -> list[Delivery]:
    """The stream with every message of those transactions lost in transport."""
    return [d for d in deliveries if not tsnrs_in(d, subscription) & lost]


def landed(spark, scenario: Scenario) -> list[tuple[str, int, int, str]]:
    return sorted((r.subscription, r.epoch, r.tsnr, r.origin) for r in
                  scenario.table(spark, "transactions").collect())


def alert_kinds(spark, scenario: Scenario) -> list[str]:
    return [r.kind for r in scenario.table(spark, "alerts").collect()]


# -- 1 -------------------------------------------------------------------------------------------

def test_a_source_topic_with_three_partitions_stops_the_job_at_start(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    settings, conf = scenario_settings(tmp_path, "parts", subscriptions=[COLOR])
    topic = next(iter(settings.topics.outputs))
    admin = AdminClient(settings.kafka.confluent())
    admin.delete_topics([topic])[topic].result(30)
    time.sleep(1)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[
        topic].result(30)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file",
                           str(conf)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"topic {topic} has 3 partitions" in errors[0]
    assert time.monotonic() - started < 60, "the check runs before any Spark query"


# -- 2 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def redelivered(spark, kafka_bootstrap: str, tmp_path_factory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("redeliver"), "redeliver",
                              transactions=150, seed=5, max_message_size=700,
                              subscriptions=[COLOR, EMPLOYEE], faults={"redeliver": 3},
                              sim={"redelivery_max_messages": 400})
    scenario.run(spark)
    return scenario


def test_redelivered_batches_land_nothing_twice_and_ask_for_nothing(
        spark, redelivered: Scenario) -> None:
    rows = landed(spark, redelivered)
    assert len(rows) == len(set(rows)) == len(redelivered.truth())
    assert {(s, t) for s, _e, t, _o in rows} == {(s, t) for s, _d, t, _n in redelivered.truth()}
    assert redelivered.table(spark, "requests").count() == 0
    assert "replicator_restart" not in alert_kinds(spark, redelivered)
    assert redelivered.table(spark, "duplicates").count() > 0


# -- 3 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lost_first(spark, kafka_bootstrap: str, tmp_path_factory) -> tuple[Scenario, set[int]]:
    """The message holding COLOR 1-2 lost in transport right after the destination-wide STRT
    (the replicator packs several small transactions into it: they are lost with it)."""
    lost: set[int] = set()

    def lose(_rep: Replicator, out: list[Delivery]) -> list[Delivery]:
        lost.update(t for d in out if tsnrs_in(d, "COLOR") & {1, 2}
                    for t in tsnrs_in(d, "COLOR"))
        return without(out, "COLOR", {1, 2})

    scenario = Scenario.build(tmp_path_factory.mktemp("first"), "first", transactions=30,
                              seed=9, subscriptions=[COLOR], edit=lose)
    scenario.run(spark)
    return scenario, lost


def test_tsnrs_lost_right_after_start_are_asked_for_and_land(spark, lost_first) -> None:
    scenario, lost = lost_first
    assert lost == set(range(1, max(lost) + 1)) and max(lost) >= 2
    [gap] = scenario.latest_gaps(spark, kind="tsnr")
    assert (gap["from_tsnr"], gap["to_tsnr"], gap["state"]) == (1, max(lost), "filled")
    rows = {(t, o) for _s, _e, t, o in landed(spark, scenario)}
    assert {(t, "resend") for t in lost} <= rows
    assert len(rows) == 30
    [hole] = scenario.latest_gaps(spark, kind="messages")  # the lost message's URBHMSNR
    assert (hole["from_tsnr"], hole["to_tsnr"], hole["state"]) == (2, 2, "lost")


# -- 4 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def overwritten(spark, kafka_bootstrap: str, tmp_path_factory) -> tuple[Scenario, list[int]]:
    """Five consecutive COLOR tsnrs lost; by the time the job asks, the circular resend
    buffer (9000 bytes here: about the last 16 transactions) has overwritten the two oldest."""
    run: list[int] = []

    def lose(rep: Replicator, out: list[Delivery]) -> list[Delivery]:
        oldest = rep.resend_buffer(rep.config.subscription("COLOR")).tsnrs("COLOR")[0]
        run.extend(range(oldest - 2, oldest + 3))
        return without(out, "COLOR", set(run))

    scenario = Scenario.build(tmp_path_factory.mktemp("overwritten"), "overwritten",
                              transactions=120, seed=9, subscriptions=[COLOR],
                              sim={"resend_buffers": (ResendBufferDef(name="RESEND1",
                                                                      size=9000),)},
                              edit=lose)
    scenario.run(spark)
    return scenario, run


def test_an_overwritten_oldest_tsnr_settles_only_itself(spark, overwritten) -> None:
    scenario, run = overwritten
    [gap] = [g for g in scenario.latest_gaps(spark) if g["from_tsnr"] == run[0]]
    assert gap["state"] == "unrecoverable" and gap["kind"] == "tsnr"
    assert sorted(gap["settled_tsnrs"]) == run[:2]
    assert sorted(gap["filled_tsnrs"]) == run[2:]
    rows = {(t, o) for _s, _e, t, o in landed(spark, scenario)}
    assert {(t, "resend") for t in run[2:]} <= rows
    assert not {t for t, _o in rows} & set(run[:2])
    trsp = {(r.tsnr, r.subc) for r in scenario.table(spark, "status_events")
            .where("st = 'TRSP' AND rsp = 131").collect()}
    assert {(t, 35) for t in run[:2]} <= trsp


# -- 5 -------------------------------------------------------------------------------------------

def test_a_transaction_arriving_after_its_gap_was_settled_lands_late(
        spark, kafka_bootstrap: str, tmp_path: Path) -> None:
    """No resend buffer: TRAN answers 131/34 and the gap is settled. The original message,
    held back by the transport, arrives later: it never landed, so it lands (filled_late)."""
    from pipeline.spark.engine.drain import await_idle

    held: list[Delivery] = []

    def hold_back(rep: Replicator, out: list[Delivery]) -> list[Delivery]:
        held.extend(d for d in out if tsnrs_in(d, "COLOR") & {10})
        return without(out, "COLOR", {10})

    color = {**COLOR, "resend_buffer": False}
    scenario = Scenario.build(tmp_path, f"late{uuid.uuid4().hex[:4]}", transactions=40,
                              seed=3, subscriptions=[color], edit=hold_back)
    assert scenario.sim is not None
    try:
        with running_job(spark, scenario.settings, feed=scenario.sim.start) as query:
            await_idle(query, timeout_s=240, quiet_batches=2, until=lambda: any(
                g["state"] == "unrecoverable" for g in scenario.latest_gaps(spark)))
            sink = KafkaSink(scenario.settings.kafka.bootstrap_servers)
            sink.send(held)
            sink.close()
            await_idle(query, timeout_s=240, quiet_batches=2, until=lambda: any(
                g["state"] == "filled_late" for g in scenario.latest_gaps(spark)))
    finally:
        scenario.sim.stop()
    # The held message carries tsnr 10 and the small transactions packed with it: each lands
    # once, live, as a late fill of the one settled gap (one filled_late row per tsnr; the last
    # one says no tsnr of the gap is still lost).
    late = set().union(*(tsnrs_in(d, "COLOR") for d in held))
    assert 10 in late
    [gap] = scenario.latest_gaps(spark, kind="tsnr")
    assert (gap["gap_id"], gap["state"], gap["missing_count"]) == (
        f"1:{min(late)}", "filled_late", 0)
    rows = [(t, o) for _s, _e, t, o in landed(spark, scenario)]
    assert all(rows.count((t, "live")) == 1 for t in late)
    assert len(rows) == 40
    assert "gap_filled_late" in alert_kinds(spark, scenario)
