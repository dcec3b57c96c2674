"""Every fault under a seed: what it does, that it is deterministic, what it leaves alone."""

from __future__ import annotations

import pytest

from devtools.sim import FaultPlan, Replicator, default_config
from devtools.sim.faults import MAX_TSNR, next_tsnr
from devtools.sim.model import SimConfig
from pipeline.urb import UrbFormatError, decode_message, requests
from tests.support.streams import by_topic, decode_all, rebuild

FORMS = ["ebcdic", "ascii"]
N = 150


@pytest.fixture(params=FORMS)
def cfg(request: pytest.FixtureRequest) -> SimConfig:
    base = default_config().with_encoding(request.param)
    return base.model_copy(update={"max_message_size": 600})


def run(cfg: SimConfig, seed: int = 9, **counts: int) -> list[bytes]:
    plan = FaultPlan(counts=counts)
    return [d.value for d in Replicator(cfg, seed, faults=plan, transactions=N).run(N)]


def deliveries(cfg: SimConfig, seed: int = 9, wrap: bool = False, **counts: int):
    plan = FaultPlan(counts=counts, wrap=wrap)
    return Replicator(cfg, seed, faults=plan, transactions=N).run(N)


def tsnrs(received, topic: str, sub: str) -> list[int]:
    return [
        e.urbttsnr
        for r in received
        if r.topic == topic
        for e in r.message.elements
        if e.eye == "URBT" and e.urbtsnam == sub
    ]


def test_no_faults_unless_asked(cfg: SimConfig) -> None:
    assert run(cfg) == [d.value for d in Replicator(cfg, 9).run(N)]


@pytest.mark.parametrize(
    "kind", ["drop_transaction", "drop_continuation", "duplicate", "restart", "corrupt"]
)
def test_each_fault_is_deterministic_under_the_seed(cfg: SimConfig, kind: str) -> None:
    once = run(cfg, **{kind: 2})
    assert once == run(cfg, **{kind: 2})
    assert once != run(cfg)
    assert once != run(cfg, seed=10, **{kind: 2})


def test_drop_transaction_leaves_a_tsnr_and_msnr_gap(cfg: SimConfig) -> None:
    received = decode_all(deliveries(cfg, drop_transaction=3))
    gaps = 0
    for rs in by_topic(received).values():
        msnrs = [r.message.header.urbhmsnr for r in rs]
        assert msnrs == sorted(msnrs)
        gaps += len(set(range(1, msnrs[-1] + 1)) - set(msnrs))
        for txs in rebuild(rs).values():
            seq = [t.tsnr for t in txs]
            gaps += len(set(range(1, seq[-1] + 1)) - set(seq)) if seq else 0
            assert seq == sorted(seq)
    assert gaps >= 3 * 2


def test_dropped_transaction_can_be_recovered_with_tran(cfg: SimConfig) -> None:
    subs = tuple(s.model_copy(update={"resend_buffer": "RESEND1"}) for s in cfg.subscriptions)
    cfg = cfg.model_copy(update={"subscriptions": subs})
    rep = Replicator(cfg, 9, faults=FaultPlan(counts={"drop_transaction": 1}), transactions=N)
    received = decode_all(rep.run(N))
    gaps = []
    for sub in cfg.subscriptions:
        seq = tsnrs(received, rep.topic(sub.destinations[0]), sub.name)
        gaps += [(sub, t) for t in sorted(set(range(1, max(seq) + 1)) - set(seq))]
    ((sub, missing),) = gaps
    dest = sub.destinations[0]
    out = decode_all(rep.answer(requests.tran(sub.name, dest, missing)))
    assert tsnrs(out, rep.topic(dest), sub.name) == [missing]


def test_drop_continuation_loses_one_urbc_message(cfg: SimConfig) -> None:
    clean = decode_all(deliveries(cfg))
    faulty = decode_all(deliveries(cfg, drop_continuation=1))
    assert len(faulty) == len(clean) - 1
    lost = [
        c for c, f in zip(clean, faulty, strict=False) if c.size != f.size or c.topic != f.topic
    ]
    assert lost[0].first.eye == "URBC"
    rs = [r for r in faulty if r.topic == lost[0].topic]
    msnrs = [r.message.header.urbhmsnr for r in rs]
    assert len(set(range(1, msnrs[-1] + 1)) - set(msnrs)) == 1
    with pytest.raises(AssertionError):
        rebuild(rs)  # the stream really is broken


def test_duplicate_is_sent_again_with_rsnd(cfg: SimConfig) -> None:
    received = decode_all(deliveries(cfg, duplicate=2))
    dups = 0
    for rs in by_topic(received).values():
        for txs in rebuild(rs).values():
            seen: dict[int, object] = {}
            for tx in txs:
                if tx.tsnr in seen:
                    dups += 1
                    assert tx.urbt.urbtrsnd == "Y" and tx.urbt.urbtptrn in ("", None)
                    assert all(urbr.urbrrsnd == "Y" for urbr, _ in tx.records)
                    first = seen[tx.tsnr]
                    assert [d.payload for _, ds in tx.records for d in ds] == [
                        d.payload for _, ds in first.records for d in ds
                    ]
                else:
                    assert tx.urbt.urbtrsnd == ""
                    seen[tx.tsnr] = tx
    assert dups >= 2


def test_restart_sends_rest_and_numbers_from_one(cfg: SimConfig) -> None:
    received = decode_all(deliveries(cfg, restart=1))
    for topic, rs in by_topic(received).items():
        rest = [i for i, r in enumerate(rs) if r.status == "REST"]
        assert len(rest) == 1, topic
        (i,) = rest
        assert rs[i].message.header.urbhmsnr == 1
        # destination-wide: names neither subscription nor (by default) destination
        assert rs[i].first.urbsdnam == "" and rs[i].first.urbssnam == ""
        before, after = rs[:i], rs[i:]
        for part in (before, after):
            msnrs = [r.message.header.urbhmsnr for r in part]
            assert msnrs == list(range(1, len(part) + 1))
        for txs in rebuild(after).values():
            assert [t.tsnr for t in txs] == list(range(1, len(txs) + 1))


def test_restart_empties_the_resend_buffer(cfg: SimConfig) -> None:
    rep = Replicator(cfg, 9)
    rep.run(30)
    rep.restart()
    out = decode_all(rep.answer(requests.tran("COLOR", "OUT1", 1, rnam="REPLY")))
    assert [(r.first.urbsrsp, r.first.urbssubc) for r in out if r.topic == "urb.replies"] == [
        (131, 35)
    ]


def test_corrupt_damages_exactly_one_message(cfg: SimConfig) -> None:
    clean, faulty = run(cfg), run(cfg, corrupt=1)
    assert len(clean) == len(faulty)
    diff = [i for i, (c, f) in enumerate(zip(clean, faulty, strict=True)) if c != f]
    assert len(diff) == 1


def test_corruption_is_mostly_detectable() -> None:
    cfg = default_config().model_copy(update={"max_message_size": 600})
    detected = 0
    for seed in range(10):
        clean = run(cfg, seed=seed)
        faulty = run(cfg, seed=seed, corrupt=1)
        (bad,) = [f for c, f in zip(clean, faulty, strict=True) if c != f]
        try:
            message = decode_message(bad)
            detected += bool(message.warnings)
        except UrbFormatError:
            detected += 1
    assert detected >= 5


def test_wrap_goes_from_max_to_one(cfg: SimConfig) -> None:
    received = decode_all(deliveries(cfg, wrap=True))
    for rs in by_topic(received).values():
        for txs in rebuild(rs).values():
            seq = [t.tsnr for t in txs]
            expected = [MAX_TSNR - 2]
            while len(expected) < len(seq):
                expected.append(next_tsnr(expected[-1]))
            assert seq == expected
            if len(seq) > 3:
                assert seq[2:4] == [MAX_TSNR, 1]


def test_next_tsnr_skips_zero() -> None:
    assert next_tsnr(MAX_TSNR) == 1
    assert next_tsnr(5) == 6


def test_rates_instead_of_counts_are_deterministic() -> None:
    cfg = default_config().model_copy(update={"max_message_size": 600})
    plan = FaultPlan(rates={"duplicate": 0.1, "corrupt": 0.05})
    a = Replicator(cfg, 1, faults=plan).run(100)
    assert a == Replicator(cfg, 1, faults=plan).run(100)
    assert a != Replicator(cfg, 1).run(100)


def test_counts_need_a_bounded_run() -> None:
    with pytest.raises(ValueError, match="bounded"):
        Replicator(default_config(), 1, faults=FaultPlan(counts={"restart": 1}))


def test_unknown_fault_kind_rejected() -> None:
    with pytest.raises(ValueError, match="unknown"):
        FaultPlan(counts={"meteor": 1})
