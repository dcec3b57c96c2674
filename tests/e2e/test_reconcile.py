"""``urbpipe reconcile`` on the real broker, Spark and Delta, with the simulator as Adabas.

The job lands COLOR/4 (typed tables, ``deletes: remove``) while the simulator loads it live and
answers the requests topic (INST by ISN list: the true current images of its model). Then:

* five full rounds *under that live load* on the same ISNs: not one drift verdict (a live change
  between the lake's read and the replicator's read is never ``differs``);
* the load ends, the job stops, and ``current_color_4`` is corrupted by hand with delta-rs: a
  value changed, a row deleted, a row inserted that Adabas never had;
* the job runs again and one full round finds all three (``differs`` naming the field,
  ``missing_in_lake``, ``extra_in_lake``) and sees the job's landing of the answers repair them;
* the file's records that no transaction ever touched (the simulator's file starts populated)
  are in Adabas and not in the lake: a full round cannot know them, a round over the file's
  ISN range (``--isns 1-N``) finds them ``missing_in_lake`` and repairs them;
* the next full round matches every ISN, and ``current_color_4`` equals the simulator's model;
* two full rounds capped at half the ISNs each make one cycle: the second goes on after the
  first's last ISN, and only it proves the file (``verified_through``).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pyarrow as pa
import pytest

from pipeline import errors
from pipeline.ops.lake import Lake
from pipeline.ops.reconcile_cli import exit_code
from pipeline.ops.reconcile_cmd import Options, RoundResult, run_round
from pipeline.ops.reconcile_tables import PROOFS, RESULTS
from pipeline.spark.land.tables import table_path
from tests.e2e.scenario import scenario_settings
from tests.faults.helpers import PacedLoad
from tests.support.job_run import running_job

COLOR = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True,
         "initial_state": "ICOLOR"}
LIVE_ROUNDS = 5

def _current(settings: Any) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(table_path(settings, "current_color_4")).to_pyarrow_table()

def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(1.0)

def _landed_all(settings: Any, load: PacedLoad) -> bool:
    from deltalake import DeltaTable

    rows = DeltaTable(table_path(settings, "transactions")).to_pyarrow_table(
        columns=["tsnr", "initial_state"]).to_pylist()
    return len({r["tsnr"] for r in rows if not r["initial_state"]}) >= len(load.sent)

def _round(settings: Any, log: list[str], **options: Any) -> RoundResult:
    return run_round(settings, Options(**{"full": True, "timeout": 180, **options}),
                     progress=log.append)

def _corrupt(settings: Any) -> dict[str, int]:
    """A value changed, a row deleted, a row Adabas never had inserted (an old version, as a
    hand-made row would carry): the ISNs of each."""
    from deltalake import DeltaTable, write_deltalake

    path = table_path(settings, "current_color_4")
    rows = sorted(_current(settings).to_pylist(), key=lambda r: r["isn"])
    live = [r for r in rows if not r["deleted"]]
    changed, deleted = live[0]["isn"], live[1]["isn"]
    table = DeltaTable(path)
    table.update(updates={"color": "'HAND-EDITED'"}, predicate=f"isn = {changed}")
    table.delete(f"isn = {deleted}")
    extra = dict(live[2], isn=max(r["isn"] for r in rows) + 1000, color="NOT-IN-ADABAS",
                 commit_time=datetime(2020, 1, 1))
    schema = pa.schema(DeltaTable(path).schema().to_arrow())
    write_deltalake(path, pa.Table.from_pylist([extra], schema), mode="append")
    return {"differs": changed, "missing_in_lake": deleted, "extra_in_lake": extra["isn"]}

@pytest.fixture(scope="module")
def rounds(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Any]:
    settings, _ = scenario_settings(tmp_path_factory.mktemp("reconcile"), "reconcile",
                                    subscriptions=[COLOR], layouts=[4])
    load = PacedLoad(settings, seed=11, rate=4.0)
    log: list[str] = []
    out: dict[str, Any] = {"settings": settings, "load": load, "log": log}
    try:
        with running_job(spark, settings, feed=load.start):
            _wait(lambda: _current(settings).num_rows >= 12 if Lake(settings).exists(
                "current_color_4") else False, 240, "12 COLOR rows")
            out["live"] = [_round(settings, log) for _ in range(LIVE_ROUNDS)]
            out["sent_during_live"] = len(load.sent)
            load.finish()
            _wait(lambda: _landed_all(settings, load), 240, "every transaction landed")
        out["corrupted"] = _corrupt(settings)
        with running_job(spark, settings):
            out["repair"] = _round(settings, log)
            model = load.rep.generator.file("COLOR", 4).values
            out["never_landed"] = set(model) - {r["isn"] for r in _current(settings).to_pylist()}
            out["range"] = _round(settings, log, full=False, isns=((1, max(model) + 5),))
            out["after"] = _round(settings, log)
            half = len(out["after"].files[0].isns) // 2 + 1  # a cycle of two capped rounds
            out["cycle"] = [_round(settings, log, max_isns=half) for _ in range(2)]
    finally:
        load.stop()
    return out

def test_no_false_drift_in_five_rounds_under_live_load(rounds: dict[str, Any]) -> None:
    live: list[RoundResult] = rounds["live"]
    assert len(live) == LIVE_ROUNDS
    assert rounds["sent_during_live"] > 20, "the load kept running during the rounds"
    for result in live:
        counts = result.counts()
        drift = {k: n for k, n in counts.items() if k in ("differs", "missing_in_lake",
                                                           "extra_in_lake")}
        assert not drift, (result.token, counts, "\n".join(rounds["log"]))
        assert counts.get("match", 0) >= 12, counts
    assert sum(r.counts().get("unanswered", 0) for r in live) == 0, "\n".join(rounds["log"])

def test_one_full_round_finds_every_corruption_and_the_job_repairs_it(
        rounds: dict[str, Any]) -> None:
    result: RoundResult = rounds["repair"]
    (fr,) = result.files
    found = {v.verdict: v for v in fr.verdicts if v.verdict != "match"}
    corrupted = rounds["corrupted"]
    assert {k: v.isn for k, v in found.items()} == corrupted, "\n".join(rounds["log"])
    assert found["differs"].fields == ("color",)
    assert fr.repaired == set(corrupted.values())
    assert exit_code(result) == errors.DRIFT
    assert fr.verified_through() is not None, "drift found and repaired: the file is proved"

def test_a_round_over_the_isn_range_finds_what_no_transaction_brought(
        rounds: dict[str, Any]) -> None:
    never: set[int] = rounds["never_landed"]
    assert never, "the simulator's file starts with records no transaction touches"
    (fr,) = rounds["range"].files
    missing = {v.isn for v in fr.verdicts if v.verdict == "missing_in_lake"}
    assert missing == never and fr.repaired == never, "\n".join(rounds["log"])
    assert {v.verdict for v in fr.verdicts} == {"match", "missing_in_lake"}
    assert fr.verified_through() is None, "a range round proves nothing about the whole file"


def test_the_next_round_matches_and_the_lake_equals_the_model(rounds: dict[str, Any]) -> None:
    after: RoundResult = rounds["after"]
    assert set(after.counts()) == {"match"} and exit_code(after) == errors.OK
    load: PacedLoad = rounds["load"]
    model = load.rep.generator.file("COLOR", 4).values
    rows = {r["isn"]: r for r in _current(rounds["settings"]).to_pylist() if not r["deleted"]}
    assert set(rows) == set(model)
    assert all(rows[i]["color"] == model[i]["AA"] for i in model)

def test_capped_full_rounds_make_one_cycle(rounds: dict[str, Any]) -> None:
    first, second = (r.files[0] for r in rounds["cycle"])
    everything = rounds["after"].files[0].isns
    assert first.isns + second.isns == everything, "the second after the first's last ISN"
    assert first.cycle == second.cycle == rounds["cycle"][0].token
    assert (first.done, second.done) == (False, True)
    assert first.verified_through() is None and second.verified_through() is not None
    assert {v.verdict for fr in (first, second) for v in fr.verdicts} == {"match"}


def test_verdicts_and_proofs_are_kept_in_the_lake(rounds: dict[str, Any]) -> None:
    lake = Lake(rounds["settings"])
    from deltalake import DeltaTable

    results = DeltaTable(lake.path(RESULTS)).to_pyarrow_table().to_pylist()
    repair = rounds["repair"].token
    kept = {r["verdict"]: r for r in results if r["round"] == repair and r["verdict"] != "match"}
    assert set(kept) == {"differs", "missing_in_lake", "extra_in_lake"}
    assert all(r["repaired"] for r in kept.values())
    assert kept["differs"]["fields"] == ["color"]
    changes = DeltaTable(lake.path("changes_color_4")).to_pyarrow_table(
        columns=["isn", "record_type", "origin"]).to_pylist()
    answered = {r["isn"] for r in changes if r["origin"] == "reconcile"}
    assert {rounds["corrupted"]["differs"], rounds["corrupted"]["missing_in_lake"]} <= answered
    assert {r["record_type"] for r in changes if r["origin"] == "reconcile"} == {"R"}
    proofs = DeltaTable(lake.path(PROOFS)).to_pyarrow_table().to_pylist()
    assert len(proofs) == LIVE_ROUNDS + 5
    full = sorted((p for p in proofs if p["full"]), key=lambda p: p["checked_at"])
    assert len(full) == LIVE_ROUNDS + 4
    assert [p["cycle_done"] for p in full] == [True] * (LIVE_ROUNDS + 2) + [False, True]
    times = [p["verified_through"] for p in full if p["cycle_done"]]
    assert all(t is not None for t in times) and times == sorted(times), times
    (ranged,) = [p for p in proofs if not p["full"]]
    assert ranged["verified_through"] is None and ranged["drift"] == len(rounds["never_landed"])
