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
nothing. An item is easy when:

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


class Resume:
    """The fast path over one call's items (Kafka order), tried at any position: at the
    start and again after each message the machine takes (``state_stage.key_step``).

    Why a class: a try decodes ahead (``_decode_chunk``: the next chunk of messages), and
    what it decoded serves the later tries — plainness and every field are a message's own
    (``columnar.Transactions.messages``) — so each message is decoded once, and a message
    known not to be plain is not tried at all. Chunks do not overlap: a decode has a fixed
    cost (~ what 30 messages cost), so the chunks grow fourfold while every message in them
    is plain (a busy key's 10,000 messages in five decodes), and start small again after a
    status (runs between statuses are short: decoding far past one could be wasted should
    the key's state stop being easy). A take lands at most to its chunk's end; the next
    take decodes the next chunk."""

    def __init__(self, items: Sequence[Incoming], now_ms: int, config: ReassemblyConfig,
                 key: tuple[str, str], codepage: str) -> None:
        self._items, self._now, self._config = items, now_ms, config
        self._key, self._codepage = key, codepage
        self._decoded: columnar.Transactions | None = None
        self._chunk: Chunk | None = None
        self._index: list[int] = []  # positions (in items) of the decoded messages
        self._stops: list[int] = []  # those of them not plain, ascending
        self._read = 0  # where the last chunk decoded ends (its ticks included)
        self._size = _FIRST_CHUNK  # messages the next chunk decodes

    def take(self, state: KeyState, pos: int) -> FastResult:
        """Land the easy items from ``pos`` on, changing ``state`` itself (the caller's
        run's own copy: a clone per try would deep-copy the duplicate window each time);
        nothing is changed unless something is taken."""
        items = self._items
        if pos >= len(items) or not easy_state(state) or items[pos].value is None:
            return FastResult(state, 0, None, 0)
        if pos >= self._read:
            self._decode_chunk(pos)
        stop = self._next_stop(pos)
        if stop == pos:
            return FastResult(state, 0, None, 0)  # known not plain: the machine's
        first = bisect.bisect_left(self._index, pos)
        last = bisect.bisect_right(self._index, stop) if stop is not None else len(self._index)
        assert self._decoded is not None and self._index[first] == pos
        decoded = self._decoded.messages(first, last)
        index = [i - pos for i in self._index[first:last]]
        assert self._chunk is not None
        return _take(state, state, items[pos:self._read], decoded, index, self._now,
                     self._config, (self._chunk, int(self._decoded.tx_start[first])))

    def _next_stop(self, pos: int) -> int | None:
        """The first decoded non-plain message at or after ``pos``."""
        i = bisect.bisect_left(self._stops, pos)
        return self._stops[i] if i < len(self._stops) else None

    def _decode_chunk(self, pos: int) -> None:
        """Decode the next chunk from ``pos`` (a message): ``_size`` messages and the ticks
        after them; the next chunk is four times as large if all of them were plain."""
        decoded, index, walked = _decode_messages(self._items[pos:], self._codepage,
                                                self._config.max_buffered_bytes, self._size)
        self._decoded = decoded
        self._index = [pos + i for i in index]
        self._chunk = Chunk.of(decoded, [(self._items[i].topic, self._items[i].partition,
                                          self._items[i].offset) for i in self._index])
        self._stops = [self._index[i] for i in np.flatnonzero(~decoded.plain).tolist()]
        self._read = pos + walked
        self._size = self._size * 4 if not self._stops else _AHEAD_CHUNK


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


#: messages the first chunk of a call decodes (``Resume``)
_FIRST_CHUNK = 64
#: messages the chunk after one with a status decodes: a decode's fixed cost is worth ~30
#: messages', and runs between statuses are short
_AHEAD_CHUNK = 256


def _decode_messages(items: Sequence[Incoming], codepage: str, cap: int, size: int
                   ) -> tuple[columnar.Transactions, list[int], int]:
    """The first ``size`` messages of ``items`` decoded, their positions in ``items``, and
    how many items that is (the ticks after the last message included)."""
    index: list[int] = []
    values: list[bytes] = []
    walked = 0
    while walked < len(items) and (len(index) < size or items[walked].value is None):
        value = items[walked].value
        if value is not None:
            index.append(walked)
            values.append(value)
        walked += 1
    return columnar.decode(values, codepage, cap), index, walked


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
