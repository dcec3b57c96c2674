"""Typed tables end to end: the simulator's final records equal the current-state tables, in
both encodings (EBCDIC COLOR with zoned numbers, ASCII EMPLOYEE with packed numbers, negatives
included), the SCD type 2 history holds every landed version and ends in the current state, and
Spark SQL and the ``deltalake`` package (no Spark) answer the same query."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.spark.land.tables import table_path
from tests.e2e.scenario import Scenario

COLOR_EBCDIC = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE_ASCII = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}
QUERY = "SELECT isn, color, code FROM {t} WHERE code < 0 ORDER BY isn"


@pytest.fixture(scope="module")
def typed(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("typed"), "typed", transactions=50,
                              seed=23, max_message_size=900,
                              subscriptions=[COLOR_EBCDIC, EMPLOYEE_ASCII], layouts=True)
    layouts = [lay.model_copy(update={"history": True}) for lay in scenario.settings.layouts]
    scenario.settings = scenario.settings.model_copy(update={"layouts": layouts})
    scenario.run(spark)
    return scenario


def _final(scenario: Scenario, sub: str, fnr: int) -> dict[int, dict]:
    assert scenario.sim is not None
    return dict(scenario.sim.replicator.generator.file(sub, fnr).values)


def _touched(spark, scenario: Scenario, sub: str) -> set[int]:
    rows = scenario.table(spark, "records").where(f"subscription = '{sub}'").collect()
    return {r.isn for r in rows}


def test_color_current_state_equals_the_simulator(spark, typed: Scenario) -> None:
    final = _final(typed, "COLOR", 4)
    touched = _touched(spark, typed, "COLOR")
    rows = typed.table(spark, "current_color_4").collect()
    got = {r.isn: (r.color, r.code) for r in rows}
    assert all(r.verified and not r.deleted for r in rows)
    expect = {isn: (v["AA"], Decimal(v["AB"])) for isn, v in final.items() if isn in touched}
    assert got == expect
    assert any(code < 0 for _, code in got.values()), "seed must produce negative zoned"


def test_employee_current_state_equals_the_simulator(spark, typed: Scenario) -> None:
    final = _final(typed, "EMPLOYEE", 11)
    touched = _touched(spark, typed, "EMPLOYEE")
    rows = typed.table(spark, "current_employee_11").collect()
    live = {r.isn: (r.personnel_id, r.name, r.birth, r.salary, r.bonus, r.department)
            for r in rows if not r.deleted}
    expect = {isn: (v["AA"], v["AE"], Decimal(v["AH"]), Decimal(v["AS"]).scaleb(-2), v["AT"],
                    v["AO"]) for isn, v in final.items() if isn in touched}
    assert live == expect
    deleted = {r.isn for r in rows if r.deleted}
    assert deleted == touched - set(final), "deletes: mark"
    changes = typed.table(spark, "changes_employee_11")
    assert changes.where("salary < 0 OR birth < 0").count() > 0, "negative packed numbers"
    assert typed.table(spark, "quarantine").count() == 0


def _versions(spark, scenario: Scenario, sub: str, fnr: int) -> set[tuple]:
    """(isn, commit_time, epoch, tsnr, rsnr) of every landed record of the file."""
    keys = ["subscription", "destination", "epoch", "tsnr"]
    recs = scenario.table(spark, "records").where(f"subscription = '{sub}' AND fnr = {fnr}")
    txs = scenario.table(spark, "transactions").select(*keys, "commit_time")
    return {(r.isn, r.commit_time, r.epoch, r.tsnr, r.rsnr)
            for r in recs.join(txs, keys).select("isn", "commit_time", "epoch", "tsnr",
                                                 "rsnr").collect()}


@pytest.mark.parametrize(("sub", "fnr", "cols"), [("COLOR", 4, ("color", "code")),
                                                  ("EMPLOYEE", 11, ("name", "salary"))])
def test_history_holds_every_version_and_ends_in_the_current_state(
        spark, typed: Scenario, sub: str, fnr: int, cols: tuple[str, str]) -> None:
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
    assert any(len(v) > 1 for v in by_isn.values()), "the seed must update some ISNs"
    newest = {isn: v[-1] for isn, v in by_isn.items()}
    current = {r.isn: (r[cols[0]], r[cols[1]], r.deleted)
               for r in typed.table(spark, f"current_{suffix}").collect()}
    assert current == {isn: (r[cols[0]], r[cols[1]], r.deleted) for isn, r in newest.items()
                       if sub == "EMPLOYEE" or not r.deleted}, "COLOR removes, EMPLOYEE marks"


def test_spark_sql_and_deltalake_answer_the_same_query(spark, typed: Scenario) -> None:
    from deltalake import DeltaTable, QueryBuilder

    path = table_path(typed.settings, "current_color_4")
    by_spark = [tuple(r) for r in spark.sql(QUERY.format(t=f"delta.`{path}`")).collect()]
    qb = QueryBuilder().register("current_color_4", DeltaTable(path))
    table = qb.execute(QUERY.format(t="current_color_4")).read_all()
    by_deltalake = list(zip(*(table.column(c).to_pylist() for c in ("isn", "color", "code")),
                            strict=True))
    assert by_spark and by_spark == by_deltalake
