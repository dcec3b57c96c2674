"""Convergence after a resend on the real stack (broker, Spark, Delta).

Transactions lost in transport are resent with before images only, so the current-state rows of
their ISNs become unverified; the job then sends INST requests with exactly those ISNs, the
simulator (answering on the requests topic) sends the R images, and the MERGE makes the rows
verified. Delta's time travel shows both states of the same ``current_color_4`` table.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.spark.land.tables import table_path
from tests.e2e.scenario import Scenario
from tests.support.job_run import running_job

COLOR = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True,
         "initial_state": "ICOLOR"}
EMPLOYEE = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}


def _rows(path: str, version: int | None = None, columns: list[str] | None = None) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(path, version=version).to_pyarrow_table(columns=columns).to_pylist()


def inst_settled(scenario: Scenario) -> bool:
    """Every INST request the job sent has its CMPL or ERRO (read without Spark)."""
    alerts = [a for a in _rows(table_path(scenario.settings, "alerts"),
                               columns=["kind", "details"])
              if a["kind"].startswith("initial_state_")]
    asked = {json.loads(a["details"])["request_id"] for a in alerts
             if a["kind"] == "initial_state_requested"}
    done = {json.loads(a["details"])["request_id"] for a in alerts
            if a["kind"] in ("initial_state_completed", "initial_state_failed")}
    return bool(asked) and asked <= done


def run_until_settled(scenario: Scenario, spark, timeout_s: float = 420.0) -> None:
    """Scenario.run, waiting also for the INST requests' replies (they follow the resends)."""
    from devtools.demo import gaps_settled
    from pipeline.spark.engine.drain import await_idle

    assert scenario.sim is not None
    try:
        with running_job(spark, scenario.settings, feed=scenario.sim.start) as query:
            await_idle(query, timeout_s=timeout_s, quiet_batches=2,
                       until=lambda: scenario.sim.streamed.is_set()
                       and gaps_settled(scenario.settings) and inst_settled(scenario))
    finally:
        scenario.sim.stop()
    assert scenario.sim.error is None, scenario.sim.error


@pytest.fixture(scope="module")
def converged(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("inst"), "inst", transactions=40,
                              seed=2, faults={"drop_transaction": 3}, max_message_size=900,
                              subscriptions=[COLOR, EMPLOYEE], layouts=True)
    run_until_settled(scenario, spark)
    return scenario


def test_unverified_rows_become_verified_in_the_current_table(spark, converged: Scenario
                                                               ) -> None:
    settings = converged.settings
    records = converged.table(spark, "records").where(
        "subscription = 'COLOR' AND resend AND type IN ('I', 'U')").collect()
    resent = {r.isn for r in records}
    assert resent, "the seed must drop COLOR transactions that are followed by others"
    requests = converged.table(spark, "requests").where("kind = 'INST'").collect()
    assert requests and {i for r in requests for i in r.isns} == resent
    assert all((r.initial_state, r.dbid, r.fnr) == ("ICOLOR", 10006, 4) for r in requests)

    path = table_path(settings, "current_color_4")
    from deltalake import DeltaTable

    latest = DeltaTable(path).version()
    seen_unverified = {r["isn"] for v in range(latest + 1)
                       for r in _rows(path, v, ["isn", "verified"])
                       if r["isn"] in resent and r["verified"] is False}
    assert seen_unverified, "a resend marked rows unverified at some table version"

    assert converged.sim is not None
    final = converged.sim.replicator.generator.file("COLOR", 4).values
    rows = {r.isn: r for r in converged.table(spark, "current_color_4").collect()}
    for isn in seen_unverified & set(final):
        row = rows[isn]
        assert row.verified, f"ISN {isn} verified after its R image"
        assert (row.color, row.code) == (final[isn]["AA"], Decimal(final[isn]["AB"]))
    assert all(r.verified for r in rows.values()), "no row is left unverified"
    gone = {r.isn for r in converged.table(spark, "records").where(
        "subscription = 'COLOR' AND tsnr = 0 AND rsp = 113").collect()}
    assert not gone & set(rows), "an ISN the initial state did not find (113) is deleted"


def test_the_inst_requests_completed_and_were_alerted(spark, converged: Scenario) -> None:
    alerts = converged.table(spark, "alerts").where("kind LIKE 'initial_state_%'").collect()
    kinds = [a.kind for a in alerts]
    assert kinds.count("initial_state_requested") == kinds.count("initial_state_completed") > 0
    assert "initial_state_failed" not in kinds
    cmpl = converged.table(spark, "status_events").where(
        "rt = 'INST' AND st = 'CMPL'").collect()
    assert cmpl and {s.subscription for s in cmpl} == {"COLOR"}, "routed by the INST name"


def test_a_requests_table_from_before_inst_requests_gains_the_columns(spark, test_settings,
                                                                     tmp_path) -> None:
    """Upgrading a lake: the job's start (``ensure_table``, deciding from what delta-rs reads
    of the log) adds the INST columns to an existing ``requests`` table (Delta would refuse
    the append of a row that has them); a second start changes nothing."""
    from pyspark.sql.types import StructType

    from pipeline.spark.land.tables import SCHEMAS, ensure_table

    stream = test_settings.stream.model_copy(update={"lake_dir": str(tmp_path / "lake")})
    settings = test_settings.model_copy(update={"stream": stream})
    path = table_path(settings, "requests")
    old = ("subscription string, destination string, epoch int, tsnr bigint, token string, "
           "reply_destination string, attempt int, gap_id string, requested_at timestamp, "
           "idempotency_key string, batch_id bigint")
    spark.createDataFrame([("COLOR", "OUT1", 1, 3) + (None,) * 7], old).write.format(
        "delta").save(path)
    schema = StructType.fromDDL(f"{SCHEMAS['requests']}, batch_id bigint")
    ensure_table(spark, settings, "requests")
    versions = len(list((Path(path) / "_delta_log").glob("*.json")))
    ensure_table(spark, settings, "requests")  # a second start changes nothing
    assert len(list((Path(path) / "_delta_log").glob("*.json"))) == versions
    row = spark.createDataFrame([("COLOR", "OUT1", 1, "INST", [5, 9])],
                                "subscription string, destination string, epoch int, "
                                "kind string, isns array<bigint>")
    row.write.format("delta").mode("append").save(path)
    got = spark.read.format("delta").load(path)
    assert set(got.columns) == set(schema.fieldNames())
    assert {(r.kind, tuple(r.isns or ())) for r in got.collect()} == {(None, ()), ("INST", (5, 9))}
