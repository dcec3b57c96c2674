"""Typed tables end to end over many files: COLOR (EBCDIC, zoned numbers, ``deletes: remove``)
over six files and EMPLOYEE (ASCII, packed numbers, ``deletes: mark``) over six, every file
with a layout and history. The connector redelivers the stream's tail twice, and transactions
lost in transport come back late as resends (before images only: their rows unverified) that
initial-state requests make whole. Per file: the current-state table equals the simulator's
final records, the SCD type 2 history holds every landed version with intervals that tile and
ends in the current state; Spark SQL and the ``deltalake`` package (no Spark) answer the same
query."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.spark.land.tables import table_path
from tests.e2e.scenario import Scenario
from tests.e2e.test_initial_state import run_until_settled

FILES = {"COLOR": (4, 5, 6, 7, 8, 9), "EMPLOYEE": (11, 12, 13, 14, 15, 16)}
COLOR = {"name": "COLOR", "destinations": ["OUT1"], "files": list(FILES["COLOR"]),
         "ebcdic": True, "initial_state": "ICOLOR"}
EMPLOYEE = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": list(FILES["EMPLOYEE"]),
            "ebcdic": False, "initial_state": "IEMPL"}
QUERY = "SELECT isn, color, code FROM {t} WHERE code < 0 ORDER BY isn"
KEYS = ["subscription", "destination", "epoch", "tsnr"]


@pytest.fixture(scope="module")
def typed(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("typed"), "typed", transactions=60,
                              seed=24, max_message_size=900,
                              faults={"redeliver": 2, "drop_transaction": 2},
                              subscriptions=[COLOR, EMPLOYEE], layouts=True)
    conf = {lay.subscription: lay for lay in scenario.settings.layouts}
    layouts = [conf[sub].model_copy(update={"fnr": fnr, "history": True})
               for sub, fnrs in FILES.items() for fnr in fnrs]
    scenario.settings = scenario.settings.model_copy(update={"layouts": layouts})
    run_until_settled(scenario, spark)
    return scenario


def _final(scenario: Scenario, sub: str, fnr: int) -> dict[int, dict]:
    assert scenario.sim is not None
    return dict(scenario.sim.replicator.generator.file(sub, fnr).values)


def _touched(spark, scenario: Scenario, sub: str, fnr: int) -> set[int]:
    rows = scenario.table(spark, "records").where(
        f"subscription = '{sub}' AND fnr = {fnr}").collect()
    return {r.isn for r in rows}


def _values(sub: str, v: dict) -> tuple:
    if sub == "COLOR":
        return v["AA"], Decimal(v["AB"])
    return (v["AA"], v["AE"], Decimal(v["AH"]), Decimal(v["AS"]).scaleb(-2), v["AT"], v["AO"])


def _row_values(sub: str, r) -> tuple:
    if sub == "COLOR":
        return r.color, r.code
    return r.personnel_id, r.name, r.birth, r.salary, r.bonus, r.department


def test_the_stream_was_redelivered_and_resent(spark, typed: Scenario) -> None:
    assert typed.table(spark, "duplicates").count() > 0, "the connector's redeliveries"
    resent = typed.table(spark, "records").where("resend").count()
    assert resent > 0, "transactions lost in transport came back as resends"
    assert typed.table(spark, "requests").where("kind = 'INST'").count() > 0, \
        "resent rows asked to be made whole"
    unverified = sum(typed.table(spark, f"history_{sub.lower()}_{fnr}").where(
        "NOT verified").count() for sub, fnrs in FILES.items() for fnr in fnrs)
    assert unverified, "a resend's version is in the history, unverified"
    assert typed.table(spark, "quarantine").count() == 0
    negative = [typed.table(spark, f"changes_{sub.lower()}_{fnr}").where(where).count()
                for sub, where in (("COLOR", "code < 0"),
                                   ("EMPLOYEE", "salary < 0 OR birth < 0"))
                for fnr in FILES[sub]]
    assert sum(negative), "negative zoned and packed numbers"


@pytest.mark.parametrize("sub", ["COLOR", "EMPLOYEE"])
def test_every_files_current_state_equals_the_simulator(spark, typed: Scenario,
                                                        sub: str) -> None:
    files_with_rows = 0
    for fnr in FILES[sub]:
        final, touched = _final(typed, sub, fnr), _touched(spark, typed, sub, fnr)
        rows = typed.table(spark, f"current_{sub.lower()}_{fnr}").collect()
        files_with_rows += bool(rows)
        assert all(r.verified for r in rows), f"{sub}/{fnr}: every row made whole"
        live = {r.isn: _row_values(sub, r) for r in rows if not r.deleted}
        assert live == {isn: _values(sub, v) for isn, v in final.items() if isn in touched}
        deleted = {r.isn for r in rows if r.deleted}
        if sub == "COLOR":
            assert not deleted, "deletes: remove"
        else:
            assert deleted == touched - set(final), "deletes: mark"
    assert files_with_rows == len(FILES[sub]), "the seed must touch every file"


def _versions(spark, scenario: Scenario, sub: str, fnr: int) -> set[tuple]:
    """(isn, version) of every landed record of the file: an initial-state record is as new
    as its read (URBRTIME), a live one as its transaction's commit."""
    recs = scenario.table(spark, "records").where(f"subscription = '{sub}' AND fnr = {fnr}")
    txs = scenario.table(spark, "transactions").where("tsnr != 0").select(*KEYS, "commit_time")
    live = recs.where("tsnr != 0").join(txs, KEYS).collect()
    read = recs.where("tsnr = 0").collect()
    return ({(r.isn, r.commit_time, r.epoch, r.tsnr, r.rsnr) for r in live}
            | {(r.isn, r.record_time, r.epoch, r.tsnr, r.rsnr) for r in read})


@pytest.mark.parametrize("sub", ["COLOR", "EMPLOYEE"])
def test_every_files_history_holds_every_version_and_ends_in_the_current_state(
        spark, typed: Scenario, sub: str) -> None:
    updated = 0
    for fnr in FILES[sub]:
        suffix = f"{sub.lower()}_{fnr}"
        rows = typed.table(spark, f"history_{suffix}").collect()
        assert {(r.isn, r.commit_time, r.epoch, r.tsnr, r.rsnr) for r in rows} == _versions(
            spark, typed, sub, fnr)
        by_isn: dict[int, list] = {}
        for r in rows:
            by_isn.setdefault(r.isn, []).append(r)
        for isn_rows in by_isn.values():
            isn_rows.sort(key=lambda r: (r.commit_time, r.epoch, r.tsnr, r.rsnr))
            assert [r.valid_to for r in isn_rows[:-1]] == [r.valid_from for r in isn_rows[1:]]
            assert [r.is_current for r in isn_rows] == [False] * (len(isn_rows) - 1) + [True]
        updated += any(len(v) > 1 for v in by_isn.values())
        newest = {isn: v[-1] for isn, v in by_isn.items()}
        current = {r.isn: (_row_values(sub, r), r.deleted)
                   for r in typed.table(spark, f"current_{suffix}").collect()}
        assert current == {isn: (_row_values(sub, r), r.deleted) for isn, r in newest.items()
                           if sub == "EMPLOYEE" or not r.deleted}, "COLOR removes, EMPLOYEE marks"
    assert updated, "the seed must update some ISNs"


def test_spark_sql_and_deltalake_answer_the_same_query(spark, typed: Scenario) -> None:
    from deltalake import DeltaTable, QueryBuilder

    answers = []
    for fnr in FILES["COLOR"]:
        name = f"current_color_{fnr}"
        path = table_path(typed.settings, name)
        by_spark = [tuple(r) for r in spark.sql(QUERY.format(t=f"delta.`{path}`")).collect()]
        qb = QueryBuilder().register(name, DeltaTable(path))
        table = qb.execute(QUERY.format(t=name)).read_all()
        by_deltalake = list(zip(*(table.column(c).to_pylist()
                                  for c in ("isn", "color", "code")), strict=True))
        assert by_spark == by_deltalake
        answers += by_spark
    assert answers, "the seed must leave negative codes"
