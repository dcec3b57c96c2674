"""Convergence after a resend, end to end in memory (initial-state rows, then the resent changes).

A transaction lost in transport → gap → TRAN → resend (before images only, so its ISNs are
unverified) → INST with exactly those ISNs → the simulator answers INIT, R pseudo-transactions,
CMPL → the reference model of the current-state MERGE (``pipeline.typed.versioning``) ends
with every row verified and equal to the simulator's database. And the failure side: an INST
against a file the definition does not cover is answered INST/ERRO → a critical alert.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from devtools.sim import FaultPlan, Replicator
from devtools.sim.payloads import encode_record
from pipeline.ops.initial_state_cmd import current_requests
from pipeline.reassembly import TransactionComplete, stck_to_datetime
from pipeline.reassembly.config import InitialStateTarget
from pipeline.reassembly.events import InitialStateRequested
from pipeline.typed.versioning import action_of, apply_batch
from pipeline.urb import decode_message
from tests.support.harness import REQUEST_TOKEN, Harness, default_reassembly
from tests.support.scenarios import sim_config, simulate

TARGET = InitialStateTarget("COLOR", "ICOLOR", ((10006, 4),), ("OUT1",))
ROUTES = {"ICOLOR": "COLOR"}
NO_DELETES = {"insert": 0.3, "update": 0.7, "delete": 0.0, "min_records": 1, "max_records": 6}


def definition(files: list[int], selection: str = "isnlist") -> list[dict[str, Any]]:
    return [{"name": "ICOLOR", "dbid": 10006, "files": files, "selection": selection}]


def run_loop(seed: int, *, files: list[int] = [4], mix: dict | None = None,  # noqa: B006
             drops: int = 3, count: int = 40, encoding: str = "ebcdic") -> Harness:
    overrides: dict[str, Any] = {"initial_states": definition(files)}
    if mix is not None:
        overrides["mix"] = mix
    config = sim_config(encoding, subscriptions=("COLOR",), **overrides)
    rep, out, _ = simulate(config, count, seed=seed,
                           faults=FaultPlan(counts={"drop_transaction": drops}))
    h = Harness(rep, config=default_reassembly(initial_states=(TARGET,)),
                initial_state_routes=ROUTES)
    h.feed(out)
    h.run([5, 5, 5])
    return h


def current_model(h: Harness) -> dict[int, dict[str, Any]]:
    """The current table of COLOR/4 after every batch, by the MERGE's reference model (rows
    an analyst sees: a model that keeps delete tombstones keeps them out of sight)."""
    state: dict[int, dict[str, Any]] = {}
    for batch in h.batches:
        changes = [change for e in batch.events if isinstance(e, TransactionComplete)
                   for change in _changes(e)]
        state = apply_batch(state, changes, ["after"], "remove")
    return {isn: row for isn, row in state.items() if not row["deleted"]}


def _changes(e: TransactionComplete) -> list[dict[str, Any]]:
    after = {i.rsnr: i.payload for i in e.images if i.image_type == "A"}
    return [{"isn": r.isn, "action": action_of(r.type, r.rsnr in after, r.rsp),
             "after": after.get(r.rsnr), "commit_time": stck_to_datetime(e.commit_time),
             "epoch": e.epoch, "tsnr": e.tsnr, "rsnr": r.rsnr, "destination": e.destination}
            for r in e.records if r.fnr == 4]


def database(rep: Replicator) -> dict[int, bytes]:
    """The simulator's file 4 of COLOR now, as after images."""
    sub = rep.config.subscription("COLOR")
    assert sub is not None
    records = rep.generator.file("COLOR", 4)
    return {isn: encode_record(sub.layout, v, sub.encoding) for isn, v in records.values.items()}


def inst_requests(h: Harness) -> list[InitialStateRequested]:
    return [e for b in h.batches for e in b.events if isinstance(e, InitialStateRequested)]


def alert_kinds(h: Harness) -> Counter:
    return Counter(a["kind"] for a in h.tables["alerts"])


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_lost_transactions_converge_to_the_database_through_tran_and_inst(
        encoding: str) -> None:
    h = run_loop(seed=2, mix=NO_DELETES, encoding=encoding)
    resent = [r for r in h.tables["transactions"] if r["origin"] == "resend"]
    assert resent, "the seed must drop transactions that are followed by others"
    unverified = {r["isn"] for r in h.tables["records"] if r["resend"] and r["type"] in "IU"}
    requests = inst_requests(h)
    assert requests and {i for q in requests for _, _, isns in q.files for i in isns} == unverified
    for raw in (q for q in h.requests_sent if decode_message(q).elements[0].urbirt == "INST"):
        urbi = decode_message(raw).elements[0]
        assert (urbi.urbiinam, urbi.urbidbid, urbi.urbifnr, urbi.urbirtok) == (
            "ICOLOR", 10006, 4, TARGET.token_for("OUT1", REQUEST_TOKEN))
        assert set(urbi.isns) <= unverified
    initial = [r for r in h.tables["transactions"] if r["origin"] == "initial_state"]
    assert initial and all(r["tsnr"] == 0 and r["initial_state"] for r in initial)
    kinds = alert_kinds(h)
    assert kinds["initial_state_requested"] == kinds["initial_state_completed"] == len(requests)
    assert kinds["initial_state_failed"] == kinds["initial_state_overdue"] == 0
    listed = current_requests(h.tables["requests"], h.tables["alerts"])  # urbpipe's view
    assert [(r.request_id, r.state) for r in listed] == [
        (q.request_id, "completed") for q in requests]
    model, db = current_model(h), database(h.replicator)
    assert unverified <= set(model)
    assert all(row["verified"] for row in model.values()), "every row verified in the end"
    assert {isn: row["after"] for isn, row in model.items()} == {
        isn: db[isn] for isn in model}, "current state equals the simulator's database"


def test_before_the_inst_answers_arrive_the_resent_isns_are_unverified() -> None:
    config = sim_config("ebcdic", subscriptions=("COLOR",), initial_states=definition([4]),
                        mix=NO_DELETES)
    rep, out, _ = simulate(config, 40, seed=2, faults=FaultPlan(counts={"drop_transaction": 3}))
    h = Harness(rep, config=default_reassembly(initial_states=(TARGET,)),
                initial_state_routes=ROUTES)
    h.feed(out)
    for _ in range(50):  # batches until the first INST request, answered by nothing yet
        h.answer_requests = not any(isinstance(e, InitialStateRequested)
                                    for b in h.batches for e in b.events)
        if not h.answer_requests or (not h.pending and not h.checkpoint.timeouts):
            break
        h.batch()
    [first, *_] = inst_requests(h)
    model = current_model(h)
    asked = [i for _, _, isns in first.files for i in isns]
    by_resend = [model[i] for i in asked if model[i]["tsnr"] in first.tsnrs]
    assert by_resend and not any(row["verified"] for row in by_resend)
    # an ISN a later live change already rewrote is verified by it (asked for all the same)
    assert all(row["verified"] for i in asked if (row := model[i]) not in by_resend)


def test_an_inst_the_definition_does_not_cover_is_a_critical_alert() -> None:
    h = run_loop(seed=2, files=[2], mix=NO_DELETES)
    failed = [a for a in h.tables["alerts"] if a["kind"] == "initial_state_failed"]
    assert failed and len(failed) == len(inst_requests(h))
    for alert in failed:
        assert alert["severity"] == "critical"
        assert (alert["details"]["rsp"], alert["details"]["subcode"]) == (131, 12)
        assert "definition has no file with the DBID/FNR" in alert["message"]
    erro = [s for s in h.tables["status_events"] if s["st"] == "ERRO"]
    assert erro and all(s["subscription"] == "COLOR" for s in erro), "routed by its name"
    resent = {t for q in inst_requests(h) for t in q.tsnrs}
    by_resend = [row for row in current_model(h).values() if row["tsnr"] in resent]
    assert by_resend and not any(row["verified"] for row in by_resend), "nothing verified them"


def test_a_select_all_definition_answers_an_isn_list_with_erro_15() -> None:
    config = sim_config("ebcdic", subscriptions=("COLOR",),
                        initial_states=definition([4], selection="all"), mix=NO_DELETES)
    rep, out, _ = simulate(config, 40, seed=2, faults=FaultPlan(counts={"drop_transaction": 3}))
    h = Harness(rep, config=default_reassembly(initial_states=(TARGET,)),
                initial_state_routes=ROUTES)
    h.feed(out)
    h.run()
    subcodes = {a["details"]["subcode"] for a in h.tables["alerts"]
                if a["kind"] == "initial_state_failed"}
    assert subcodes == {15}


def test_replies_land_once_per_copy_but_settle_each_request_once() -> None:
    h = run_loop(seed=5, mix=NO_DELETES)
    completes = [s for s in h.tables["status_events"] if s["st"] == "CMPL"]
    assert len(completes) == 2 * len(inst_requests(h)), "reply and output destination copies"
    assert alert_kinds(h)["initial_state_completed"] == len(inst_requests(h))


def test_with_deletes_the_current_state_still_equals_the_database() -> None:
    """ISNs a resend touched but a later change deleted come back from the initial state as
    response 113: a delete, so no unverified row is left for a record that does not exist."""
    h = run_loop(seed=3, drops=6, count=80)
    assert any(r["rsp"] == 113 for r in h.tables["records"]), "seed: some ISN was deleted"
    model, db = current_model(h), database(h.replicator)
    assert {isn: row["after"] for isn, row in model.items()} == {
        isn: db[isn] for isn in model if isn in db}
    assert set(model) <= set(db)
    assert all(row["verified"] for row in model.values())


# ------------------------------------------------------------ a subscription, two destinations
EMPL = InitialStateTarget("EMPLOYEE", "IEMPL", ((10006, 9),), ("OUT1", "OUT2"))


def run_two_destinations(files: list[int], seed: int = 4) -> Harness:
    """EMPLOYEE goes to OUT1 and OUT2: transactions lost on both, each key asks for its own
    resends' ISNs. INST replies name no subscription or destination, and INST/ERRO goes to the
    reply destination only: the token must lead each reply to the key that asked."""
    config = sim_config("ebcdic", subscriptions=("EMPLOYEE",), mix=NO_DELETES, initial_states=[
        {"name": "IEMPL", "dbid": 10006, "files": files, "selection": "isnlist"}])
    rep, out, _ = simulate(config, 60, seed=seed,
                           faults=FaultPlan(counts={"drop_transaction": 4}))
    h = Harness(rep, config=default_reassembly(initial_states=(EMPL,)),
                initial_state_routes={"IEMPL": "EMPLOYEE"})
    h.feed(out)
    h.run([5, 5, 5])
    return h


def test_two_destinations_each_key_gets_its_own_replies() -> None:
    h = run_two_destinations(files=[9])
    requests = inst_requests(h)
    askers = {q.destination for q in requests}
    assert askers == {"OUT1", "OUT2"}, "the seed must lose transactions on both destinations"
    assert {q.destination: q.token for q in requests} == {
        "OUT1": f"{REQUEST_TOKEN}1", "OUT2": f"{REQUEST_TOKEN}2"}
    kinds = alert_kinds(h)
    assert kinds["initial_state_completed"] == len(requests)
    assert kinds["initial_state_failed"] == kinds["initial_state_overdue"] == 0
    listed = current_requests(h.tables["requests"], h.tables["alerts"])
    assert sorted((r.destination, r.request_id, r.state) for r in listed) == sorted(
        (q.destination, q.request_id, "completed") for q in requests), "no external tracks"


def test_two_destinations_an_erro_reaches_the_key_that_asked() -> None:
    h = run_two_destinations(files=[2])  # the definition does not cover file 9: INST/ERRO
    requests = inst_requests(h)
    assert {q.destination for q in requests} == {"OUT1", "OUT2"}
    failed = [a for a in h.tables["alerts"] if a["kind"] == "initial_state_failed"]
    assert sorted((a["destination"], a["details"]["request_id"]) for a in failed) == sorted(
        (q.destination, q.request_id) for q in requests)
    assert all(a["severity"] == "critical" for a in failed)
    assert alert_kinds(h)["initial_state_overdue"] == 0
