"""The fast path: a key's runs of plain messages landed column-wise, the state changed as
``step`` would.

Why: most of a busy key's messages are the easy case — whole transactions, each the next
tsnr, nothing flagged, no status — and for those ``step`` does nothing but land them. Here
they are read by ``columnar.decode`` and landed as the transactions/records/images columns
``tables.transaction_columns`` makes, with the state changed exactly as ``step`` would
change it; the other messages go through the machine, from that state.

The hand-off goes both ways within one call (``state_stage.key_step``, ``Resume``): items
(messages and the decode stage's ticks, in Kafka order) are taken while they are easy; the
first one that is not goes to the machine (``machine.MachineRun``: one run per call, its
timers once at the end), and the fast path is tried again after it, on the run's state. A
real stream has a status or a continuation every few dozen messages (the simulator's 2 %
C5 statuses: runs of ~20), so a fast path that ended at the first of them landed almost
nothing. ``fast_step`` is the one-shot form: the leading easy items only. An item is easy
when:

- the key's state is easy: no open (partial) transaction, no open gap, nothing held. (Then
  ``step`` has no gap, hold, fill or partial business a message could touch, and timers it
  runs afterwards see the same state either way.)
- a tick: it only moves the destination's clock (``newest_sent``), a max.
- a message: plain (``columnar``: whole transactions, no URBC, URBS, URBF or resend flag,
  counts consistent, under the byte cap) and each of its transactions, in order, is what
  ``sequence.classify`` calls NEXT (or BASELINE for a key's first) without a doubt: not in
  the duplicate window, not sent before the epoch's STRT/REST, its tsnr the next expected
  one, that position not settled as lost. A message is taken whole or not at all, as
  ``step`` never splits one.

What ``step`` would have changed for such messages, and only that, changes here — through
the same functions the machine changes them with (``transitions.place_run``,
``transitions.seen_sent``): the duplicate window, the next expected tsnr, ``epoch_fresh``,
the ``landed`` counter, the STAT tracker's last data time, ``discard`` (cleared by a URBT),
the destination's clock. The property test ``tests/unit/integration/test_fast_path.py`` holds both
paths to the same rows and state on simulated streams with every fault kind.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.reassembly import columnar, transitions
from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.landed import Chunk, LandedRun
from pipeline.reassembly.sequence import RING
from pipeline.reassembly.state import KeyState

_FINGERPRINT = struct.Struct(">QII")


@dataclass(frozen=True, slots=True)
class Incoming:
    """One item of a key's batch as the fast path reads it: a replicator message
    (``value``) or a tick of its destination (``tick``: the newest URBHTIME read there)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None = None
    tick: int | None = None


@dataclass(frozen=True, slots=True)
class FastResult:
    """``state``: what to hand to ``step`` with the items from ``consumed`` on (the state
    given, untouched, when nothing was taken); ``run``: the landed transactions (their
    tables' columns: ``landed.landed_columns``), to come before ``step``'s; ``landed``: how
    many transactions."""

    state: KeyState | None
    consumed: int
    run: LandedRun | None
    landed: int


def easy_state(state: KeyState | None) -> bool:
    """A state the fast path may start from (None: a key seen for the first time)."""
    return state is None or (state.partial is None and not state.gaps and not state.held)


def fast_step(state: KeyState | None, items: Sequence[Incoming], now_ms: int,
              config: ReassemblyConfig, key: tuple[str, str], codepage: str) -> FastResult:
    """Take the leading easy items of a key's batch (Kafka order) into a clone of
    ``state``; see the module doc (``Resume`` takes them at any position)."""
    if not items or not easy_state(state) or items[0].value is None:
        return FastResult(state, 0, None, 0)
    st = state.clone() if state is not None else KeyState()
    taken = Resume(items, now_ms, config, key, codepage).take(st, 0)
    return taken if taken.consumed else FastResult(state, 0, None, 0)


class Resume:
    """The fast path over one call's items (Kafka order), tried at any position: at the
    start and again after each message the machine takes (``state_stage.key_step``).

    Why a class: a try decodes ahead (``_decode_prefix``: up to the first non-plain
    message, or further), and what it decoded serves the later tries — plainness and every
    field are a message's own (``columnar.Transactions.messages``) — so each message is
    decoded about once, not once per try, and a message known not to be plain is not tried
    at all. A decode has a fixed cost (~ what 30 messages cost), so re-decoding a 20-message
    run at every status would cost more than it saves."""

    def __init__(self, items: Sequence[Incoming], now_ms: int, config: ReassemblyConfig,
                 key: tuple[str, str], codepage: str) -> None:
        self._items, self._now, self._config = items, now_ms, config
        self._key, self._codepage = key, codepage
        self._decoded: columnar.Transactions | None = None
        self._chunk: Chunk | None = None
        self._index: list[int] = []  # positions (in items) of the decoded messages
        self._stops: list[int] = []  # those of them not plain, ascending
        self._read = 0  # items[:_read] are decoded (the messages among them)
        self._tries = 0

    def take(self, state: KeyState, pos: int) -> FastResult:
        """Land the easy items from ``pos`` on, changing ``state`` itself (the caller's
        run's own copy: a clone per try would deep-copy the duplicate window each time);
        nothing is changed unless something is taken."""
        items = self._items
        if pos >= len(items) or not easy_state(state) or items[pos].value is None:
            return FastResult(state, 0, None, 0)
        stop = self._next_stop(pos)
        if stop == pos:
            return FastResult(state, 0, None, 0)  # known not plain: the machine's
        if (stop is None and self._read < len(items)) or pos >= self._read:
            self._decode_from(pos)
            stop = self._next_stop(pos)
        first = bisect.bisect_left(self._index, pos)
        last = bisect.bisect_right(self._index, stop) if stop is not None else len(self._index)
        assert self._decoded is not None and self._index[first] == pos
        decoded = self._decoded.messages(first, last)
        index = [i - pos for i in self._index[first:last]]
        assert self._chunk is not None
        return _take(state, state, items[pos:], decoded, index, self._now, self._config,
                     (self._chunk, int(self._decoded.tx_start[first])))

    def _next_stop(self, pos: int) -> int | None:
        """The first decoded non-plain message at or after ``pos``."""
        i = bisect.bisect_left(self._stops, pos)
        return self._stops[i] if i < len(self._stops) else None

    def _decode_from(self, pos: int) -> None:
        """Decode from ``pos`` up to a non-plain message (or the end), in growing chunks
        (``_AHEAD_CHUNK`` first, after the call's first try: runs between statuses are
        short, and what is decoded past the first stop serves the next tries)."""
        self._tries += 1
        first = _FIRST_CHUNK if self._tries == 1 else _AHEAD_CHUNK
        decoded, index, walked = _decode_prefix(self._items[pos:], self._codepage,
                                                self._config.max_buffered_bytes, first)
        self._decoded = decoded
        self._index = [pos + i for i in index]
        self._chunk = Chunk.of(decoded, [(self._items[i].topic, self._items[i].partition,
                                          self._items[i].offset) for i in self._index])
        self._stops = [self._index[i] for i in np.flatnonzero(~decoded.plain).tolist()]
        self._read = pos + walked


def _take(st: KeyState, given: KeyState | None, items: Sequence[Incoming],
          decoded: columnar.Transactions, index: list[int], now_ms: int,
          config: ReassemblyConfig, within: tuple[Chunk, int]) -> FastResult:
    """Land the leading plain, in-sequence messages of ``decoded`` (the messages at
    ``index`` in ``items``, up to a non-plain one or the end of ``items``) into ``st``
    (the state to change: ``given`` or its clone); ``given`` back when nothing is taken.
    ``within``: the chunk ``decoded`` was sliced from, and its first transaction there."""
    nothing = FastResult(given, 0, None, 0)
    st.window.resize(config.duplicate_window)
    plain = int(np.argmin(decoded.plain)) if not decoded.plain.all() else len(index)
    ends = decoded.tx_end[:plain]
    fps = _fingerprints(decoded, int(ends[-1]) if plain else 0)
    landed = _in_sequence(st, decoded, fps)
    messages = int(np.searchsorted(ends, landed, side="right"))  # whole messages only
    if messages == 0:
        return nothing
    landed = int(ends[messages - 1])
    transitions.place_run(st, decoded.tx["urbttsnr"][:landed].tolist(), fps[:landed], now_ms)
    consumed = index[messages] if messages < len(index) else len(items)
    newest = max([0, *decoded.htime[:messages].tolist(),
                  *(item.tick or 0 for item in items[:consumed] if item.value is None)])
    transitions.seen_sent(st, newest, config)
    chunk, t0 = within
    return FastResult(st, consumed, LandedRun(chunk, t0, t0 + landed, st.epoch), landed)


#: messages decoded first; the chunk grows fourfold while every message in it is plain
_FIRST_CHUNK = 64
#: messages decoded first by a later try of ``Resume``: a decode's fixed cost is worth
#: ~30 messages', and what lies past the first stop is kept for the next tries
_AHEAD_CHUNK = 256


def _decode_prefix(items: Sequence[Incoming], codepage: str, cap: int, first: int
                   ) -> tuple[columnar.Transactions, list[int], int]:
    """The key's messages up to and including its first non-plain one (or all of them),
    their positions in ``items``, and how many items were read.

    Why not all at once: only the leading plain run is landed here, and on a real stream it
    is often short (a status, a continuation, a STRT every few dozen messages: the
    simulator's 2 % C5 statuses give runs of ~20 messages), so decoding a 10,000-message
    batch to land its first 20 was most of the call's fast-path time. Growing chunks keep
    the all-plain case at ~1.3 decodes per message. The positions are gathered as far as
    decoded, not over all ``items``: the fast path is tried again after every message the
    machine takes."""
    index: list[int] = []
    values: list[bytes] = []
    walked, limit = 0, first
    while True:
        while walked < len(items) and (len(index) < limit or items[walked].value is None):
            value = items[walked].value
            if value is not None:
                index.append(walked)
                values.append(value)
            walked += 1
        decoded = columnar.decode(values, codepage, cap)
        if walked == len(items) or not decoded.plain.all():
            return decoded, index, walked
        limit *= 4


def _fingerprints(d: columnar.Transactions, count: int) -> list[int]:
    """``sequence.fingerprint`` of the first ``count`` transactions."""
    tx = d.tx
    return [zlib.crc32(_FINGERPRINT.pack(c, r & 0xFFFFFFFF, b & 0xFFFFFFFF))
            for c, r, b in zip(tx["urbtttim"][:count].tolist(), tx["urbtrcnt"][:count].tolist(),
                               tx["urbtdbid"][:count].tolist(), strict=True)]


def _in_sequence(st: KeyState, d: columnar.Transactions, fps: list[int]) -> int:
    """How many of the first transactions (``fps``: their fingerprints) ``sequence.classify``
    calls NEXT (the first BASELINE for a key without a sequence) one after the other, for
    sure: not in the duplicate window, not sent before the epoch began (its message's
    URBHTIME against the STRT/REST's), the next tsnr, a position not settled. Commit times
    play no part (``sequence.classify``)."""
    count = len(fps)
    if count == 0:
        return 0
    tsnr = d.tx["urbttsnr"][:count]
    base = st.next_u if st.next_u is not None else int(tsnr[0])
    u = base + np.arange(count, dtype=np.int64)
    ok = tsnr == (u - 1) % RING + 1  # to_tsnr
    if st.epoch_time:
        sent = np.repeat(d.htime, d.tx_end - d.tx_start)[:count]
        ok &= (sent == 0) | (sent >= np.uint64(st.epoch_time))
    first = int(np.argmin(ok)) if not ok.all() else count
    settled = st.given_up.lowest(st.epoch, base + (st.next_u is None), base + first - 1)
    if settled is not None:
        first = settled - base
    window = st.window
    for t, (value, fp) in enumerate(zip(tsnr[:first].tolist(), fps[:first], strict=True)):
        if window.contains(value, fp):
            return t
    return first
