"""`make demo` promises (README, devtools/demo.py) a connector redelivery, a replicator
restart and a TRSP 131/35 from the circular resend buffer, with a gaps table that tells the
truth. Its simulator plan (seed 7, 300 transactions, FAULTS, SIM) runs here through the
in-memory harness, so a change of the simulator or the job that loses one of them shows up
without a broker or Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from devtools.demo import FAULTS, SIM
from devtools.sim import FaultPlan, Replicator
from devtools.sim.config import from_settings
from pipeline.config import load_settings
from tests.support.harness import Harness
from tests.support.truth import generate

ROOT = Path(__file__).resolve().parents[3]


def test_the_demo_plan_shows_a_redelivery_a_restart_and_an_overwritten_resend() -> None:
    settings = load_settings(ROOT / "conf" / "local.yaml", env={})
    rep = Replicator(from_settings(settings).model_copy(update=SIM), 7,
                     faults=FaultPlan(counts=FAULTS), transactions=300)
    deliveries, sent = generate(rep, 300)
    h = Harness(rep)
    h.feed(deliveries)
    h.run()
    gaps = {(g["subscription"], g["gap_id"]): g for g in h.tables["gaps"]}  # latest row each
    tsnr_gaps = [g for g in gaps.values() if g["kind"] == "tsnr"]
    trsp = {(r["subc"], r["tsnr"]) for r in h.tables["status_events"] if r["st"] == "TRSP"}
    lost_35 = {t for subc, t in trsp if subc == 35}
    assert lost_35, "a lost transaction overwritten in the resend buffer: TRSP 131/35"
    assert any(g["state"] == "filled" for g in tsnr_gaps), "and one resent"
    for g in tsnr_gaps:  # the table's truth: a gap ends filled, or settled by its reason
        assert g["state"] in ("filled", "unrecoverable"), g
        if g["state"] == "unrecoverable":
            assert "subcode 35" in g["reason"] or "restarted" in g["reason"], g
    assert {t["epoch"] for t in h.tables["transactions"]} == {1, 2}, "one restart"
    reasons = Counter(d["reason"] for d in h.tables["duplicates"])
    assert reasons["transaction already landed"] > 50, "a redelivered batch, dropped"
    landed = {(t["subscription"], t["epoch"], t["tsnr"]) for t in h.tables["transactions"]}
    assert len(landed) == len(h.tables["transactions"]), "nothing lands twice"
    assert not [g for g in gaps.values() if g["kind"] == "messages"
                and g["to_tsnr"] - g["from_tsnr"] > 5], "no false hole from the redelivery"
    assert len(sent) == 300
