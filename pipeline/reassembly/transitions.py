"""The changes to a key's state that both the machine and the fast path make, written once.

h11's first rule: everything that changes the state lives in one place. The machine
(``pipeline.reassembly.machine``) changes a ``KeyState`` through its rules; the fast path
(``fast.py``) lands runs of plain messages without the machine and must leave exactly the
state the machine would have left. The changes they have in common are these functions, so a
change to one of them changes both paths (and the equivalence property test,
tests/unit/integration/test_fast_path.py, checks the rest). Nothing outside
``pipeline.reassembly`` changes a ``KeyState`` (tests/unit/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.state import KeyState


def seen_sent(st: KeyState, stck: int, config: ReassemblyConfig) -> None:
    """The destination's clock moved on: the newest URBHTIME seen on it (raw STCK and Unix
    ms; evidence for verdicts, the partial transaction's timeout and restarts, R2)."""
    if stck > st.newest_sent:
        st.newest_sent = stck
        st.newest_sent_ms = config.stck_ms(stck)


def data_seen(st: KeyState, now_ms: int) -> None:
    """A data message was read: the key is not idle (STAT waits again)."""
    st.stat.data_seen(now_ms)


def advance_to(st: KeyState, u: int, baseline: bool) -> None:
    """The sequence moves past position ``u`` (``baseline``: the key's first placement, its
    baseline); the epoch is no longer fresh."""
    st.epoch_fresh = False
    if baseline:
        st.base_u = u
    st.next_u = max(st.next_u or 0, u + 1)


def remember_landed(st: KeyState, pairs: Sequence[tuple[int, int]]) -> None:
    """Transactions (tsnr, fingerprint) landed in the current epoch: the duplicate window."""
    if len(pairs) == 1:
        st.window.add(*pairs[0], st.epoch)
    else:
        st.window.extend(list(pairs), st.epoch)


def place_run(st: KeyState, tsnrs: Sequence[int], fps: Sequence[int], now_ms: int) -> None:
    """Transactions placed one after the other as NEXT (a key's first: its BASELINE) and
    landed — what the machine does for each of them, at once: the sequence, the window,
    the ``landed`` count, the key not idle, no transaction being skipped."""
    first = st.next_u is None
    advance_to(st, (tsnrs[0] if first else st.next_u) + len(tsnrs) - 1, baseline=False)
    if first:
        st.base_u = tsnrs[0]
    remember_landed(st, list(zip(tsnrs, fps, strict=True)))
    st.count("landed", len(tsnrs))
    data_seen(st, now_ms)
    st.discard = None
