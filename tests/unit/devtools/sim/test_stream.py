"""The generated stream follows the output rules of seed 001, in both forms."""

from __future__ import annotations

import pytest

from devtools.sim import Replicator, default_config
from devtools.sim.clock import stck
from devtools.sim.model import SimConfig
from devtools.sim.payloads import decode_record
from tests.support.streams import (
    by_topic,
    decode_all,
    destination_topics,
    transactions_by_destination,
)

FORMS = ["ebcdic", "ascii"]


def config(encoding: str, max_size: int = 700, **update: object) -> SimConfig:
    base = default_config().with_encoding(encoding)  # type: ignore[arg-type]
    return base.model_copy(update={"max_message_size": max_size, **update})


@pytest.fixture(params=FORMS)
def encoding(request: pytest.FixtureRequest) -> str:
    return request.param


def run(cfg: SimConfig, n: int = 200, seed: int = 5) -> list:
    return decode_all(Replicator(cfg, seed).run(n))


def test_form_matches_encoding(encoding: str) -> None:
    for r in run(config(encoding), 20):
        assert r.message.ebcdic == (encoding == "ebcdic")
        assert r.message.big_endian == (encoding == "ebcdic")


def test_starts_with_strt_and_ends_with_term_per_destination(encoding: str) -> None:
    cfg = config(encoding)
    groups = by_topic(run(cfg, 50))
    names = destination_topics(cfg)
    assert set(groups) == set(names)
    for rs in groups.values():
        assert rs[0].status == "STRT" and rs[-1].status == "TERM"
        for r in (rs[0], rs[-1]):
            # a real replicator names neither; the consumer knows the destination by topic
            assert r.first.urbssnam == "" and r.first.urbsdnam == ""
            assert r.key is None


def test_msnr_counts_per_destination(encoding: str) -> None:
    for rs in by_topic(run(config(encoding))).values():
        assert [r.message.header.urbhmsnr for r in rs] == list(range(1, len(rs) + 1))


def test_tsnr_counts_per_subscription_on_each_destination(encoding: str) -> None:
    cfg = config(encoding)
    per_dest = transactions_by_destination(run(cfg, 300), cfg)
    for dest, subs in per_dest.items():
        for sub, txs in subs.items():
            assert dest in cfg.subscription(sub).destinations
            assert [t.tsnr for t in txs] == list(range(1, len(txs) + 1))
    total = {s: len(txs) for s, txs in per_dest["OUT2"].items()}
    assert total["EMPLOYEE"] == len(per_dest["OUT1"]["EMPLOYEE"])


def test_transaction_count_is_all_subscriptions_together(encoding: str) -> None:
    cfg = config(encoding)
    per_dest = transactions_by_destination(run(cfg, 120), cfg)
    seen = {(s, t.tsnr) for subs in per_dest.values() for s, txs in subs.items() for t in txs}
    assert len(seen) == 120


def test_max_message_size_respected_and_splits_happen(encoding: str) -> None:
    received = run(config(encoding, 600), 300)
    assert all(r.size <= 600 for r in received)
    assert any(r.first.eye == "URBC" for r in received)


def test_split_between_urbr_and_urbd_and_between_two_urbds(encoding: str) -> None:
    kinds = set()
    for size in range(420, 700, 16):
        for r in run(config(encoding, size), 60, seed=size):
            if r.first.eye == "URBC":
                kinds.add("after-urbr" if r.first.urbcdsnr == 0 else "after-urbd")
                if r.message.elements[1].eye == "URBD" and r.first.urbcdsnr > 0:
                    kinds.add("between-urbds")
                if r.message.elements[1].eye == "URBD" and r.first.urbcdsnr == 0:
                    kinds.add("urbr|urbd")
    assert {"between-urbds", "urbr|urbd"} <= kinds


def test_further_transaction_only_if_it_fits_whole(encoding: str) -> None:
    """Every message holding more than one transaction start has them all whole (rule 17)."""
    received = run(config(encoding, 2000), 300)
    multi = 0
    for r in received:
        eyes = [e.eye for e in r.message.elements]
        if eyes.count("URBT") + (eyes[0] == "URBC") > 1:
            multi += 1
            last_t = max(i for i, e in enumerate(eyes) if e == "URBT")
            assert "URBE" in eyes[last_t:], "a second transaction must fit whole"
    assert multi > 0


def test_a_transaction_that_fits_is_never_split(encoding: str) -> None:
    """A split only happens when the transaction could not fit into an empty message."""
    cfg = config(encoding, 1500)
    for subs in transactions_by_destination(run(cfg, 200), cfg).values():
        for txs in subs.values():
            for tx in txs:
                if tx.messages > 1:
                    size = (
                        64
                        + 128
                        + 32
                        + sum(64 + sum(d.urbdlen for d in ds) for _r, ds in tx.records)
                    )
                    assert size > 1500


def test_times_in_order(encoding: str) -> None:
    cfg = config(encoding)
    for r in run(cfg, 100):
        elements = r.message.elements
        for el in elements:
            if el.eye == "URBT":
                assert el.urbtttim < el.urbtptim < r.message.header.urbhtime
            if el.eye == "URBR":
                assert el.urbrtime < r.message.header.urbhtime


def test_images_by_kind_and_subscription(encoding: str) -> None:
    cfg = config(encoding)
    per_dest = transactions_by_destination(run(cfg, 300), cfg)
    for dest_subs in per_dest.values():
        for sub_name, txs in dest_subs.items():
            sub = cfg.subscription(sub_name)
            for tx in txs:
                for urbr, urbds in tx.records:
                    types = [d.urbdtyp for d in urbds]
                    before = ["B"] if sub.sends_before else []
                    after = ["A"] if sub.sends_after else []
                    expected = {"I": after, "U": before + after, "D": before}[urbr.urbrtyp]
                    assert types == expected
                    for d in urbds:
                        values = decode_record(sub.layout, d.payload, sub.encoding)
                        assert set(values) == {f.name for f in sub.layout}


def test_updates_and_deletes_hit_existing_isns(encoding: str) -> None:
    cfg = config(encoding)
    per_dest = transactions_by_destination(run(cfg, 400), cfg)
    for sub_name, txs in per_dest["OUT2"].items():
        alive = {
            (f, i)
            for f in cfg.subscription(sub_name).files
            for i in range(1, cfg.records_per_file + 1)
        }
        for tx in txs:
            for urbr, _ in tx.records:
                key = (urbr.urbrfnr, urbr.urbrisn)
                if urbr.urbrtyp == "I":
                    assert key not in alive
                    alive.add(key)
                else:
                    assert key in alive
                    if urbr.urbrtyp == "D":
                        alive.remove(key)


def test_before_image_matches_previous_after_image(encoding: str) -> None:
    cfg = config(encoding)
    per_dest = transactions_by_destination(run(cfg, 300), cfg)
    last: dict[tuple[int, int], bytes] = {}
    for tx in per_dest["OUT1"]["EMPLOYEE"]:
        for urbr, urbds in tx.records:
            key = (urbr.urbrfnr, urbr.urbrisn)
            images = {d.urbdtyp: d.payload for d in urbds}
            if "B" in images and key in last:
                assert images["B"] == last[key]
            if "A" in images:
                last[key] = images["A"]


def test_c5da_now_and_then(encoding: str) -> None:
    cfg = config(encoding, c5_rate=0.1)
    c5 = [r for r in run(cfg, 100) if r.status == "C5DA"]
    assert c5
    for r in c5:
        sub = cfg.subscription(r.first.urbssnam)
        assert r.key is None and r.first.urbsdbid == sub.dbid
        assert r.first.data.decode("cp037" if encoding == "ebcdic" else "latin-1").startswith(
            "C5 USER DATA"
        )


def test_c5da_off_when_rate_is_zero(encoding: str) -> None:
    assert default_config().c5_rate > 0  # the built-in set sends C5DA now and then
    assert not [r for r in run(config(encoding, c5_rate=0.0), 100) if r.status == "C5DA"]


def test_same_seed_same_bytes() -> None:
    cfg = config("ebcdic")
    assert Replicator(cfg, 11).run(80) == Replicator(cfg, 11).run(80)
    assert Replicator(cfg, 11).run(80) != Replicator(cfg, 12).run(80)


def test_stck_is_microseconds_shifted() -> None:
    from pipeline.urb import stck_to_datetime

    assert stck_to_datetime(stck(1_000_000)).year == 1900
    assert stck(1) == 1 << 12
