"""Simulator set-ups for the integration tests: configs, runs, and the checks they share."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from devtools.sim import Delivery, FaultPlan, Replicator, SimConfig
from devtools.sim.config import DEFAULT, build_config
from pipeline.urb import UrbFormatError, decode_message
from tests.support.harness import Harness
from tests.support.truth import Landed, Sent, generate, landed

SMALLEST_MESSAGE = 280  # the simulator's minimum for the built-in layouts


def sim_config(encoding: str = "ebcdic", subscriptions: Sequence[str] = (),
               two_databases: bool = False, **overrides: Any) -> SimConfig:
    """The built-in set in one form (or 'mixed': EMPLOYEE ASCII, the rest EBCDIC), optionally
    only some subscriptions, with top-level keys overridden (max_message_size, c5_rate …).

    ``two_databases``: COLOR over file 4 of databases 10006 and 10007, whose clocks disagree
    (10007 runs 50 ms behind) and 10006 a cluster of two nuclei committing concurrently —
    commit times out of tsnr order (issue 35)."""
    raw = copy.deepcopy(DEFAULT)
    raw["subscriptions"] = [s for s in raw["subscriptions"]
                            if not subscriptions or s["name"] in subscriptions]
    if two_databases:
        for sub in raw["subscriptions"]:
            if sub["name"] == "COLOR":
                sub["files"] = [{"dbid": 10006, "fnr": 4}, {"dbid": 10007, "fnr": 4}]
        raw["databases"] = [{"dbid": 10007, "clock_offset_ms": -50.0},
                            {"dbid": 10006, "nuclei": 2, "nucleus_lag_ms": 20}]
    for sub in raw["subscriptions"]:
        mixed = "ascii" if sub["name"] == "EMPLOYEE" else "ebcdic"
        sub["encoding"] = mixed if encoding == "mixed" else encoding
    used = {d for s in raw["subscriptions"] for d in s["destinations"]} | {"REPLY"}
    raw["destinations"] = [d for d in raw["destinations"] if d["name"] in used]
    raw.update(overrides)
    return build_config(raw)


def simulate(config: SimConfig, count: int, seed: int, faults: FaultPlan | None = None
             ) -> tuple[Replicator, list[Delivery], list[Sent]]:
    """A replicator session of ``count`` transactions (STRT … TERM) and its ground truth."""
    rep = Replicator(config, seed=seed, faults=faults, transactions=count)
    out, sent = generate(rep, count)
    return rep, out, sent


def joined_late(deliveries: Sequence[Delivery]) -> list[Delivery]:
    """The stream as a job sees it that started reading after the replicator's STRT (its
    numbering did not begin at 1 then: the wrap tests start near 4294967295)."""
    def is_start(d: Delivery) -> bool:
        try:
            els = decode_message(d.value).elements
        except UrbFormatError:
            return False
        return all(e.eye == "URBS" and e.urbsst == "STRT" for e in els)

    return [d for d in deliveries if not is_start(d)]


def run_harness(rep: Replicator, deliveries: Sequence[Delivery], cuts: Sequence[int] = (),
                **options: Any) -> Harness:
    """Feed a session into a fresh harness and run it until it settles."""
    h = Harness(rep, **options)
    h.feed(deliveries)
    h.run(cuts)
    return h


def live_tsnrs(deliveries: Sequence[Delivery]) -> set[tuple[str, str, int]]:
    """(topic, subscription, tsnr) of every URBT that actually reached Kafka and decodes."""
    out = set()
    for d in deliveries:
        try:
            msg = decode_message(d.value)
        except UrbFormatError:
            continue
        out |= {(d.topic, e.urbtsnam, e.urbttsnr) for e in msg.elements if e.eye == "URBT"}
    return out


TruthKey = tuple[str, str, int, Any]  # destination, subscription, tsnr, commit time


def truth_keys(sent: Sequence[Sent]) -> dict[TruthKey, Sent]:
    """Every (destination, subscription, tsnr, commit time) the simulator sent."""
    return {(d, s.subscription, s.tsnr, s.commit_time): s for s in sent for d in s.destinations}


def assert_matches_truth(h: Harness, sent: Sequence[Sent]) -> dict[TruthKey, Landed]:
    """Every landed transaction is one the simulator sent, whole, with its exact payloads.

    Returns the landed transactions by (destination, subscription, tsnr, commit time); fails
    on any transaction landing twice or on any record or image that differs from what was
    generated. The commit time tells apart the two transactions of one tsnr after a restart.
    """
    truth = truth_keys(sent)
    out: dict[TruthKey, Landed] = {}
    for (dest, sub, _epoch, tsnr), copies in landed(h.tables).items():
        if copies[0].row["initial_state"]:
            continue
        for one in copies:
            key = (dest, sub, tsnr, one.row["commit_time"])
            assert key not in out, f"{key} landed more than once"
            assert key in truth, f"{key} landed but was never sent"
            _assert_same(one, truth[key], key)
            out[key] = one
    return out


def _assert_same(one: Landed, s: Sent, key: TruthKey) -> None:
    """Records and images exactly as generated (a resend without its after images)."""
    assert one.row["record_count"] == len(s.tx.records), key
    assert one.records == s.records(), key
    assert one.images == s.images(resent=one.row["resent"]), key
    assert one.row["image_count"] == len(one.images), key


def gap_states(h: Harness) -> dict[tuple[str, str, str], list[str]]:
    """The state sequence of every tsnr gap, by (destination, subscription, gap_id)
    (``kind`` messages — holes in URBHMSNR — left out)."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for g in h.tables["gaps"]:
        if g["kind"] != "tsnr":
            continue
        out.setdefault((g["destination"], g["subscription"], g["gap_id"]), []).append(g["state"])
    return out
