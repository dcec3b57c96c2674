"""The real world, round 3, end to end in one job run (issue 35): a subscription over two
databases whose clocks disagree, a redelivered old stretch, a confirmed resend that arrives
late, and a lost initial-state message.

COLOR lists file 4 of database 10006 and file 4 of database 10007 (SFILE/SFDBID, seed 000);
10007's clock runs 50 ms behind 10006's and 10006 is a cluster of two nuclei committing
concurrently, so commit times come out of tsnr order (seed 001: time stamps are machine time;
the replicator numbers transactions in the order it receives them). The connector redelivers
an old stretch of OUT1. One transaction, tsnr 33 of database 10006, is lost in transport: the
job asks for it (TRAN), the replicator confirms at once with TRSP response 0 (seed 000: "a
status message (URBS) will be sent to that destination for successful prior-transaction
requests") and the resend reaches OUT1 15 s later (its connector lags). The resend has before
images only, so the job asks for its ISNs' initial state (INST); the answer's first message,
the start of a two-message pseudo-transaction, is lost while INIT and CMPL arrive; the job must
ask again and the second answer is whole.

What must hold: every transaction lands once; the only TRAN is one for tsnr 33; the INST
request is asked again and completes with every record landed; each database's typed current
table is that database's true current image (the simulator's model per (dbid, fnr, isn)).
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from devtools.sim.model import DatabaseDef
from pipeline.config import Layout
from tests.e2e.scenario import Scenario
from tests.support.job_run import running_job

A, B = 10006, 10007
COLOR = {"name": "COLOR", "destinations": ["OUT1"], "ebcdic": True, "initial_state": "ICOLOR",
         "files": [{"dbid": A, "fnr": 4}, {"dbid": B, "fnr": 4}]}
SIM = {"databases": (DatabaseDef(dbid=B, clock_offset_ms=-50),
                     DatabaseDef(dbid=A, nuclei=2, nucleus_lag_ms=20)),
       "redelivery_max_messages": 150,   # seed 1 repeats 54 messages of OUT1
       "resend_delay_ms": 15_000, "inst_lost_message": "first"}
LOST = 33  # seed 1 loses COLOR tsnr 33 (database 10006) of 40 in transport


def _alerts(scenario: Scenario) -> list[dict]:
    from deltalake import DeltaTable

    from pipeline.spark.land.tables import table_path

    return DeltaTable(table_path(scenario.settings, "alerts")).to_pyarrow_table(
        columns=["kind", "at_ms", "details"]).to_pylist()


def last_inst_settled(scenario: Scenario) -> bool:
    """The newest INST request the job sent has ended (completed or failed): read without
    Spark. Only the newest: an answer the job found incomplete may end otherwise."""
    alerts = [a for a in _alerts(scenario) if a["kind"].startswith("initial_state_")]
    asked = [a for a in alerts if a["kind"] == "initial_state_requested"]
    if not asked:
        return False
    last = max(asked, key=lambda a: a["at_ms"])
    rid = json.loads(last["details"])["request_id"]
    return any(a["kind"] in ("initial_state_completed", "initial_state_failed")
               and json.loads(a["details"])["request_id"] == rid for a in alerts)


def _run(scenario: Scenario, spark, timeout_s: float) -> None:
    """Start the job, stream, answer requests; done when the lost tsnr landed and the newest
    INST request ended (not on gaps settling: a job that makes false gaps leaves them open,
    and the checks below say what went wrong)."""
    from deltalake import DeltaTable

    from pipeline.spark.engine.drain import await_idle
    from pipeline.spark.land.tables import table_path

    def lost_landed() -> bool:
        rows = DeltaTable(table_path(scenario.settings, "transactions")).to_pyarrow_table(
            columns=["tsnr"]).column("tsnr").to_pylist()
        return LOST in rows

    assert scenario.sim is not None
    try:
        with running_job(spark, scenario.settings, feed=scenario.sim.start) as query:
            await_idle(query, timeout_s=timeout_s, quiet_batches=2,
                       until=lambda: scenario.sim.streamed.is_set() and lost_landed()
                       and last_inst_settled(scenario))
    finally:
        scenario.sim.stop()
    assert scenario.sim.error is None, scenario.sim.error


@pytest.fixture(scope="module")
def world(spark, kafka_bootstrap: str, tmp_path_factory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("world"), "world", transactions=40,
                              seed=1, max_message_size=700, subscriptions=[COLOR],
                              faults={"redeliver": 1, "drop_transaction": 1}, sim=SIM)
    # lean typed tables: the format buffer only, deletes marked (no tombstone table)
    layouts = [Layout(subscription="COLOR", dbid=d, fnr=4, format_buffer="AA,16,A,AB,16,U.",
                      columns={"AA": "color", "AB": "code"}, gfft="ignore", deletes="mark")
               for d in (A, B)]
    scenario.settings = scenario.settings.model_copy(update={"layouts": layouts})
    _run(scenario, spark, timeout_s=180)
    return scenario


def test_the_stream_is_what_the_scenario_says(world: Scenario) -> None:
    commits = [(s.tx.commit, s.tx.dbid) for s in world.sent]
    assert {d for _, d in commits} == {A, B}
    assert sum(1 for i in range(1, len(commits)) if commits[i][0] < commits[i - 1][0]) >= 10
    lost = next(s for s in world.sent if s.tsnr == LOST)
    assert lost.tx.dbid == A and {r.kind for r in lost.tx.records} >= {"I", "U"}
    assert world.sim is not None and len(world.sim.replicator.answer_faults.lost) == 1


def test_every_transaction_lands_once(spark, world: Scenario) -> None:
    rows = [(r.subscription, r.epoch, r.tsnr, r.dbid) for r in
            world.table(spark, "transactions").collect()]
    assert len(rows) == len(set(rows)), "a transaction landed twice"
    truth = {(s.subscription, s.tsnr, s.tx.dbid) for s in world.sent}
    live = {(sub, tsnr, dbid) for sub, _e, tsnr, dbid in rows if tsnr}  # 0: initial state
    assert live == truth, "every one landed"
    assert {e for _s, e, _t, _d in rows} == {1}
    assert world.table(spark, "duplicates").count() > 0, "the redelivery was dropped"


def test_only_the_lost_transaction_is_asked_for_once_though_its_resend_is_late(
        spark, world: Scenario) -> None:
    trsp = world.table(spark, "status_events").where(
        f"rt = 'TRAN' AND st = 'TRSP' AND tsnr = {LOST}").collect()
    assert trsp and {r.rsp for r in trsp} == {0}, "the replicator confirmed the request"
    tran = world.table(spark, "requests").where("kind = 'TRAN'").collect()
    assert [r.tsnr for r in tran] == [LOST], "one TRAN, for the lost tsnr only"
    [gap] = world.latest_gaps(spark, kind="tsnr")
    assert (gap["from_tsnr"], gap["to_tsnr"], gap["state"]) == (LOST, LOST, "filled")
    kinds = {r.kind for r in world.table(spark, "alerts").collect()}
    assert not kinds & {"storm_tripped", "replicator_restart"}, kinds


def test_a_lost_initial_state_message_is_asked_again_and_every_record_lands(
        spark, world: Scenario) -> None:
    isns = {r.isn for r in next(s for s in world.sent if s.tsnr == LOST).tx.records
            if r.kind in ("I", "U")}
    inst = world.table(spark, "requests").where("kind = 'INST'").collect()
    # seed 000: a request names every file of its definition (ICOLOR: file 4 of both
    # databases), each with its database; only 10006's has ISNs to read
    assert {(r.dbid, r.fnr) for r in inst} == {(A, 4), (B, 4)}
    assert {i for r in inst if r.dbid == A for i in r.isns} == isns
    assert not any(r.isns for r in inst if r.dbid == B)
    assert len({r.request_id for r in inst}) >= 2, "the incomplete answer was asked again"
    kinds = [r.kind for r in world.table(spark, "alerts").collect()]
    assert "initial_state_completed" in kinds and "initial_state_failed" not in kinds
    read = world.table(spark, "records").where("tsnr = 0 AND type = 'R'").collect()
    assert {r.isn for r in read} >= isns, "every record of the initial state landed"


@pytest.mark.parametrize(("dbid", "table"), [(A, "current_color_4"),
                                            (B, "current_color_10007_4")])
def test_each_database_has_its_true_current_image(spark, world: Scenario, dbid: int,
                                                 table: str) -> None:
    assert world.sim is not None
    final = world.sim.replicator.generator.file("COLOR", 4, dbid).values
    touched = {r.isn for s in world.sent if s.tx.dbid == dbid for r in s.tx.records}
    rows = world.table(spark, table).collect()
    got = {r.isn: (r.color, r.code) for r in rows if not r.deleted}
    expect = {isn: (v["AA"], Decimal(v["AB"])) for isn, v in final.items() if isn in touched}
    assert got == expect
    assert all(r.verified for r in rows if not r.deleted), "the initial state verified them"
