"""The compiled chain walk (pipeline/urb/native) gives the columnar reader what its numpy walk
gives: the same elements, the same broken chains, so the same plain messages and columns.

The fast path lands what ``columnar.decode`` calls plain without the machine's checks; a
walk that saw an element the numpy walk did not (or missed a broken chain) would land a
message that must go the slow way. So both walks run on the same batches — the simulator's
streams in both forms, mutated messages (lengths clobbered, bytes flipped, cut, spliced) and
random tails behind valid headers — and the arrays and the decoded batches must be equal.
"""

from __future__ import annotations

import dataclasses
import random
from unittest import mock

import numpy as np
import pytest

from benchmarks.bench_state import stream
from pipeline.reassembly import columnar
from pipeline.urb.native import LIBRARY, load_chain_walker
from tests.unit.urb.conftest import SEED_FILES, load
from tests.unit.urb.test_fuzz import _extra_seeds, _mutate

CAP = 10_000_000


def decoded_both(values: list[bytes]) -> tuple[columnar.Transactions, columnar.Transactions]:
    """``columnar.decode`` with the compiled walk, then with the numpy walk alone."""
    assert columnar._NATIVE_WALK is not None, f"{LIBRARY} missing: make setup builds it"
    native = columnar.decode(values, "cp037", CAP)
    with mock.patch.object(columnar, "_NATIVE_WALK", None):
        numpy = columnar.decode(values, "cp037", CAP)
    return native, numpy


def assert_same(a: columnar.Transactions, b: columnar.Transactions) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, dict):
            assert x.keys() == y.keys(), field.name
            for name in x:
                assert np.array_equal(x[name], y[name]), (field.name, name)
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.parametrize("form", ["ebcdic", "ascii"])
def test_simulator_streams(form: str) -> None:
    _rep, records = stream(form, 300, 12, 3, 0.05)
    values = [r.value for r in records]
    native, numpy = decoded_both(values)
    assert_same(native, numpy)
    assert native.plain.sum() > 0.5 * len(values)  # the comparison covers landing columns


def test_mutated_batches_walk_alike() -> None:
    """2,000 batches of 1-20 messages, each mutated or whole, plus random tails: the four
    arrays and every message's ``ok`` equal, then the decoded batches equal."""
    rng = random.Random(2711)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    broken = 0
    for _ in range(2_000):
        values = []
        for _ in range(rng.randint(1, 20)):
            seed = rng.choice(seeds)
            roll = rng.random()
            values.append(seed if roll < 0.3 else _mutate(rng, seed) if roll < 0.85
                          else seed[:rng.randrange(16, 48)] + rng.randbytes(rng.randrange(64)))
        native, numpy = decoded_both(values)
        assert_same(native, numpy)
        broken += int((~native.plain).sum())
    assert broken > 1_000  # the mutations reached the walk's refusals


def test_walk_arrays_and_ok_directly() -> None:
    """The walk itself on one batch with a broken chain in the middle: same elements (those
    before the break included), ``ok`` cleared alike."""
    seeds = [load(name) for name in SEED_FILES]
    bad = bytearray(seeds[0])
    order = "big" if bad[:4] == b"\xe4\xd9\xc2\xc8" else "little"
    hlen = int.from_bytes(bad[4:8], order)
    first_len = int.from_bytes(bad[hlen + 4:hlen + 8], order)
    bad[hlen + first_len + 4:hlen + first_len + 8] = (3).to_bytes(4, order)  # 2nd: length 3
    values = [seeds[1], bytes(bad), seeds[2]]
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
    buf = np.frombuffer(b"".join(values) + bytes(256), dtype=np.uint8)
    big = np.array([v[10:12] == b"\x00\x01" for v in values])
    ebcdic = np.array([v[:1] == b"\xe4" for v in values])
    heads = np.array([int.from_bytes(v[4:8], "big" if b else "little")
                      for v, b in zip(values, big, strict=True)])
    pos, end = starts + heads, starts + lengths
    ok_native, ok_numpy = np.ones(3, dtype=bool), np.ones(3, dtype=bool)
    reader = columnar._Reader(buf)
    got = columnar._walk(reader, pos, end, ok_native, big, ebcdic)
    want = columnar._walk_numpy(reader, pos, end, ok_numpy, big, ebcdic)
    assert ok_native.tolist() == ok_numpy.tolist() == [True, False, True]
    for x, y in zip(got, want, strict=True):
        assert np.array_equal(x, y)
    assert 1 in got[0].tolist()  # the broken message's first element is still listed


def test_without_the_library_the_numpy_walk_runs(tmp_path) -> None:
    assert load_chain_walker(columnar._EYE_CODES, columnar._EYE_KINDS,
                             columnar._EYE_EBCDIC, tmp_path / "none.so") is None
