"""A subscription over two databases whose clocks disagree, and cluster nuclei (issue 35):
transactions of both databases, commit times out of tsnr order, one ISN's changes still in
commit order, and the generator's files the true current image per (dbid, fnr, isn)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from devtools.sim import Replicator, default_config
from devtools.sim.__main__ import _config, build_parser
from devtools.sim.model import SimConfig
from devtools.sim.payloads import encode_record
from devtools.sim.transactions import DELETE
from pipeline.urb import requests
from tests.support.streams import decode_all, rebuild
from tests.support.truth import generate

A, B = 10006, 10007
TWO = {"name": "COLOR", "destinations": ["OUT1"], "dbid": A,
       "files": [4, {"dbid": B, "fnr": 4}], "resend_buffer": "RESEND1",
       "layout": [{"name": "AA", "format": "A", "length": 16}]}


def two_databases(skew_ms: float = -50, nuclei: int = 1, lag_ms: int = 0,
                  **update: object) -> SimConfig:
    raw = default_config().model_dump()
    raw.update(subscriptions=[TWO], max_message_size=2000,
               initial_states=[{"name": "ICOLOR", "dbid": A,
                                "files": [4, {"dbid": B, "fnr": 4}], "selection": "isnlist"}],
               databases=[{"dbid": B, "clock_offset_ms": skew_ms, "nuclei": nuclei,
                           "nucleus_lag_ms": lag_ms}], **update)
    return SimConfig.model_validate(raw)


def test_each_transaction_is_of_one_database_and_both_appear() -> None:
    rep = Replicator(two_databases(), seed=5)
    _, sent = generate(rep, 200)
    dbids = [s.tx.dbid for s in sent]
    assert set(dbids) == {A, B}
    urbts = rebuild(decode_all(rep.outbox.redeliver("OUT1", 10_000)))["COLOR"]
    assert {t.urbt.urbtdbid for t in urbts} == {A, B}
    assert [t.tsnr for t in urbts] == list(range(1, 201)), "numbered in arrival order"


def test_a_skewed_database_commits_behind_the_other_out_of_tsnr_order() -> None:
    rep = Replicator(two_databases(skew_ms=-50), seed=5)
    _, sent = generate(rep, 200)
    commits = [(s.tx.commit, s.tx.dbid) for s in sent]
    backwards = [i for i in range(1, len(commits)) if commits[i][0] < commits[i - 1][0]]
    assert backwards, "a later tsnr of B commits before an earlier one of A"
    assert all(commits[i][1] == B for i in backwards)
    a = [c for c, d in commits if d == A]
    b = [c for c, d in commits if d == B]
    assert a == sorted(a) and b == sorted(b), "one database alone keeps commit order"


def test_cluster_nuclei_interleave_commit_times_within_one_database() -> None:
    rep = Replicator(two_databases(skew_ms=0, nuclei=3, lag_ms=40), seed=5)
    _, sent = generate(rep, 200)
    of_b = [s.tx for s in sent if s.tx.dbid == B]
    assert {tx.nucleus for tx in of_b} == {1, 2, 3}
    assert {s.tx.nucleus for s in sent if s.tx.dbid == A} == {0}
    commits = [tx.commit for tx in of_b]
    assert commits != sorted(commits), "nuclei commit concurrently: arrival is not commit order"
    urbts = rebuild(decode_all(rep.outbox.redeliver("OUT1", 10_000)))["COLOR"]
    assert {t.urbt.urbtnuci for t in urbts if t.urbt.urbtdbid == B} == {1, 2, 3}


@pytest.mark.parametrize(("skew_ms", "nuclei", "lag_ms"), [(-50, 1, 0), (1000, 3, 200),
                                                          (-1000, 2, 500)])
def test_files_hold_the_true_current_image_in_commit_order(skew_ms: float, nuclei: int,
                                                           lag_ms: int) -> None:
    """Applying every change of an ISN in commit-time order gives the generator's file: the
    model tests compare typed current state with, and a change of one ISN never commits
    before an earlier one (the record lock), however the clocks and nuclei lie."""
    rep = Replicator(two_databases(skew_ms, nuclei, lag_ms), seed=9)
    _, sent = generate(rep, 300)
    sub = rep.config.subscriptions[0]
    changes: dict[tuple[int, int, int], list[tuple[int, int, object]]] = defaultdict(list)
    for order, s in enumerate(sent):
        for r in s.tx.records:
            changes[(s.tx.dbid, r.fnr, r.isn)].append((s.tx.commit, order, r))
    for key, seq in changes.items():
        assert [c for c, _, _ in seq] == sorted(c for c, _, _ in seq), f"{key} out of order"
        assert len({c for c, _, _ in seq}) == len(seq), f"{key}: two changes, one commit time"
    for dbid in (A, B):
        values = rep.generator.file("COLOR", 4, dbid).values
        last = {isn: max(seq, key=lambda x: x[0])[2]
                for (d, _, isn), seq in changes.items() if d == dbid}
        for isn, change in last.items():
            if change.kind == DELETE:
                assert isn not in values
            else:
                assert change.after == encode_record(sub.layout, values[isn], sub.encoding)


def test_initial_state_reads_each_database_and_stamps_it_on_its_clock() -> None:
    rep = Replicator(two_databases(skew_ms=-50), seed=5)
    rep.run(40)
    out = []
    for dbid in (A, B):
        out += rep.answer(requests.inst_file("ICOLOR", dbid, 4, rnam="REPLY", isns=[1, 2, 3]))
    txs = rebuild([r for r in decode_all(out) if r.topic == "urb.out1"])["COLOR"]
    assert [(t.urbt.urbtdbid, [u.urbrisn for u, _ in t.records]) for t in txs] == [
        (A, [1, 2, 3]), (B, [1, 2, 3])]
    erro = decode_all(rep.answer(requests.inst_file("ICOLOR", 10008, 4, rnam="REPLY")))
    assert [(r.first.urbsst, r.first.urbssubc) for r in erro] == [("ERRO", 12)]


def test_a_redelivered_stretch_repeats_both_databases_byte_for_byte() -> None:
    """The connector fault of faults.py (``redeliver``) in the two-database mode."""
    rep = Replicator(two_databases(), seed=5)
    out, _ = generate(rep, 60, terminate=False)
    again = rep.redeliver("OUT1", 30)
    assert [d.value for d in again] == [d.value for d in out if d.topic == "urb.out1"][-30:]
    assert {r.first.urbtdbid for r in decode_all(again) if r.first.eye == "URBT"} == {A, B}


def test_conf_subscriptions_over_two_databases_reach_the_simulator(tmp_path) -> None:
    from devtools.sim.config import load_settings_config

    conf = tmp_path / "c.yaml"
    conf.write_text("subscriptions:\n  - name: COLOR\n    initial_state: ICOLOR\n"
                    "    files: [{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]\n")
    config = load_settings_config(conf)
    assert config.subscriptions[0].file_keys() == ((A, 4), (B, 4))
    assert config.initial_states[0].file_keys() == ((A, 4), (B, 4))


def test_the_command_line_sets_database_clocks_and_answer_faults() -> None:
    args = build_parser().parse_args([
        "--out", "x", "--database", "10007:-50", "--database", "12:20:3:40",
        "--resend-delay-seconds", "15", "--lose-inst-message", "middle",
        "--inst-max-requests", "2", "--inst-busy-seconds", "0.5"])
    config = _config(args)
    assert [(d.dbid, d.clock_offset_ms, d.nuclei, d.nucleus_lag_ms)
            for d in config.databases] == [(B, -50.0, 1, 0), (12, 20.0, 3, 40)]
    assert (config.resend_delay_ms, config.inst_lost_message, config.inst_lost_answers,
            config.inst_max_requests, config.inst_busy_ms) == (15_000, "middle", 1, 2, 500)
    with pytest.raises(ValueError, match="less than or equal to 1000"):
        _config(build_parser().parse_args(["--out", "x", "--database", "10007:1500"]))
