"""The simulator's real-world defaults and the connector's faults through the decode stage and
the state machine: no Kafka key, destination-wide STRT/REST, re-produced batches,
stalls, an overwritten resend buffer, several partitions."""

from __future__ import annotations

from collections import Counter

from devtools.sim import FaultPlan
from tests.support.harness import Harness
from tests.support.scenarios import (
    SMALLEST_MESSAGE,
    assert_matches_truth,
    gap_states,
    run_harness,
    sim_config,
    simulate,
    truth_keys,
)


def kinds(h: Harness) -> Counter:
    return Counter(a["kind"] for a in h.tables["alerts"])


def test_redelivered_batches_land_nothing_twice_and_ask_for_nothing() -> None:
    """The connector (at least once) re-produces batches of up to thousands of messages."""
    config = sim_config("mixed").model_copy(update={"redelivery_max_messages": 400})
    rep, out, sent = simulate(config, 300, seed=8, faults=FaultPlan(counts={"redeliver": 4}))
    _, clean, _ = simulate(config, 300, seed=8)
    assert len(out) > len(clean) + 30, "the redeliveries must repeat messages"
    h = run_harness(rep, out, cuts=[50] * 8)
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    assert h.tables["requests"] == [] and gap_states(h) == {}
    assert kinds(h)["replicator_restart"] == 0
    assert len(h.tables["duplicates"]) > 0


def test_redeliveries_restarts_and_losses_together_land_once_or_are_told() -> None:
    faults = FaultPlan(counts={"redeliver": 3, "restart": 2, "drop_transaction": 3,
                               "drop_continuation": 2})
    config = sim_config("mixed", max_message_size=600)
    rep, out, sent = simulate(config, 200, seed=12, faults=faults)
    h = run_harness(rep, out, cuts=[40] * 6)
    got = assert_matches_truth(h, sent)
    epochs = {(t["destination"], t["subscription"], t["epoch"], t["tsnr"])
              for t in h.tables["transactions"]}
    assert len(epochs) == len(h.tables["transactions"]), "nothing landed twice"
    missing = set(truth_keys(sent)) - set(got)
    settled = {(g["destination"], g["subscription"], t) for g in h.tables["gaps"]
               for t in g["settled_tsnrs"] or ()}
    for key in missing:
        assert key[:3] in settled or key[:3][2] >= max(
            s.tsnr for s in sent if s.subscription == key[1]), f"{key} lost silently"
    restarts = [a for a in h.tables["alerts"] if a["kind"] == "replicator_restart"]
    # every epoch begins at a REST (its echo); a key that saw nothing since its last start
    # needs none. The first restart comes right after COLOR's first transaction.
    assert restarts and all(a["message"].endswith(": REST") for a in restarts), "false epoch"
    assert sum(a["subscription"] == "COLOR" for a in restarts) == 2


def test_a_stalled_connector_delays_a_continuation_and_nothing_is_lost() -> None:
    """A stalled connector holds a continuation ten minutes; the destination's later messages are
    held behind it, so nothing proves it lost and it completes its transaction."""
    config = sim_config("ebcdic", max_message_size=SMALLEST_MESSAGE)
    rep, out, sent = simulate(config, 30, seed=3, faults=FaultPlan(counts={"stall": 2}))
    assert sum(1 for d in out if d.delay_ms) == 2
    h = run_harness(rep, out)
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    assert kinds(h)["lost_continuation"] == 0 and h.tables["requests"] == []
    assert not any(t["resent"] for t in h.tables["transactions"])


def test_unkeyed_records_on_three_partitions_land_once_and_are_flagged() -> None:
    """Unkeyed records on a topic with three partitions, as the job would meet them if the start
    check were bypassed (before commit times were compared: 1 of 40 landed, ~160 requests,
    every gap unrecoverable): commit times tell the scrambled order from restarts, so
    everything lands once and the gap fills; the holes in URBHMSNR tell the operator that
    the order is broken (the storm breaker's own test: test_transport)."""
    config = sim_config("ebcdic", subscriptions=("COLOR",))
    rep, out, sent = simulate(config, 120, seed=1)
    h = run_harness(rep, out, partitions=3, cuts=[30] * 4)
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    assert kinds(h)["replicator_restart"] == 0 and kinds(h)["messages_missing"] > 0
    assert all(s[-1] == "filled" for s in gap_states(h).values())
