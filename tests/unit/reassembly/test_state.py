"""KeyState serialisation: versioned, compact, lossless, and step never mutates its input."""

from __future__ import annotations

import pytest

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.machine import step
from pipeline.reassembly.state import KeyState
from tests.unit.reassembly.builders import KEY, Feed, Harness, txn


def _busy_state() -> KeyState:
    """Partial transaction, open gaps, held transactions, window and counters all in use."""
    h = Harness(ReassemblyConfig(landing_policy="hold"), roundtrip=False)
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2)))
    h.feed(feed.send(txn(5, 2)))                       # gap 3..4, 5 held
    h.feed([r for r in feed.send(txn(6, 2, size=300), cuts=[3]) if r.offset == feed.offset - 2])
    assert h.state is not None
    st = h.state
    assert st.partial is not None and st.gaps and st.held and len(st.window) == 3
    return st


def test_round_trip_is_lossless() -> None:
    st = _busy_state()
    again = KeyState.from_bytes(st.to_bytes())
    assert again == st
    assert again.to_bytes() == st.to_bytes()
    assert again.partial.images[0].payload == st.partial.images[0].payload


def test_serialisation_is_versioned() -> None:
    data = _busy_state().to_bytes()
    assert data[:3] == b"RA\x01"
    with pytest.raises(ValueError, match="version"):
        KeyState.from_bytes(b"RA\x02" + data[3:])
    with pytest.raises(ValueError):
        KeyState.from_bytes(b"XX" + data[2:])


def test_payload_is_stored_raw_not_base64() -> None:
    st = KeyState()
    h = Harness(roundtrip=False)
    rows = Feed().send(txn(1, 1, images=("A",), size=50_000), cuts=[3])
    h.feed([r for r in rows if r.offset == 0])
    st = h.state
    import os
    st.partial.images[0] = type(st.partial.images[0])(1, 1, "A", os.urandom(50_000))
    assert len(st.to_bytes()) < 50_000 * 1.05  # base64 would be +33%


def test_fresh_state_is_dropped() -> None:
    result = step(None, [], 1000, ReassemblyConfig(), KEY)
    assert result.state is None and result.events == [] and result.next_timeout_ms is None


def test_step_does_not_mutate_given_state() -> None:
    st = _busy_state()
    before = st.to_bytes()
    step(st, Feed(offset=50).send(txn(3), txn(4), txn(7)), 9_999_999, ReassemblyConfig(), KEY)
    assert st.to_bytes() == before


def test_window_size_follows_config() -> None:
    h = Harness(ReassemblyConfig(duplicate_window=4))
    h.feed(Feed().send(*(txn(i) for i in range(1, 11))))
    assert len(h.state.window) == 4
    assert len(KeyState.from_bytes(h.state_bytes).window) == 4
