"""The fast path: a key's leading run of plain messages landed column-wise, state handed on.

Why: most of a busy key's messages are the easy case — whole transactions, each the next
tsnr, nothing flagged, no status — and for those ``step`` does nothing but land them. Here
they are read by ``columnar.decode`` and landed as the transactions/records/images columns
``tables.transaction_columns`` makes, with the state changed exactly as ``step`` would
change it; the rest of the batch then goes through ``step`` unchanged, from that state.

The hand-off is a prefix: items (messages and the decode stage's ticks, in Kafka order) are
taken from the start while they are easy, and the first one that is not ends the fast path
for the call — it and everything after it go to ``step``. An item is easy when:

- the key's state is easy: no open (partial) transaction, no open gap, nothing held. (Then
  ``step`` has no gap, hold, fill or partial business a message could touch, and timers it
  runs afterwards see the same state either way.)
- a tick: it only moves the destination's clock (``newest_sent``), a max.
- a message: plain (``columnar``: whole transactions, no URBC, URBS, URBF or resend flag,
  counts consistent, under the byte cap) and each of its transactions, in order, is what
  ``sequence.classify`` calls NEXT (or BASELINE for a key's first) without a doubt: not in
  the duplicate window, committed after the newest commit placed (else a redelivery), its
  tsnr the next expected one, that position not settled as lost. A message is taken whole
  or not at all, as ``step`` never splits one.

What ``step`` would have changed for such messages, and only that, changes here: the
duplicate window, the next expected tsnr, the newest commit, ``epoch_fresh``, the
``landed`` counter, the STAT tracker's last data time, ``discard`` (cleared by a URBT), the
destination's clock. The property test ``tests/integration/test_fast_path.py`` holds both
paths to the same rows and state on simulated streams with every fault kind.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.reassembly import columnar
from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.sequence import RING
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.tables import (
    IMAGE_COLUMNS,
    RECORD_COLUMNS,
    TRANSACTION_COLUMNS,
    Columns,
)
from pipeline.urb.stck import TOD_UNIX_US

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
    given, untouched, when nothing was taken); ``columns``: the landed transactions' tables
    (``tables.transaction_columns``' shape), to come before ``step``'s; ``landed``: how
    many transactions."""

    state: KeyState | None
    consumed: int
    columns: Columns | None
    landed: int


def easy_state(state: KeyState | None) -> bool:
    """A state the fast path may start from (None: a key seen for the first time)."""
    return state is None or (state.partial is None and not state.gaps and not state.held)


def fast_step(state: KeyState | None, items: Sequence[Incoming], now_ms: int,
              config: ReassemblyConfig, key: tuple[str, str], codepage: str) -> FastResult:
    """Take the leading easy items of a key's batch (Kafka order); see the module doc."""
    nothing = FastResult(state, 0, None, 0)
    if not items or not easy_state(state) or items[0].value is None:
        return nothing
    index = [i for i, item in enumerate(items) if item.value is not None]
    decoded = _decode_prefix([items[i].value for i in index],  # type: ignore[misc]
                             codepage, config.max_buffered_bytes)
    st = state.clone() if state is not None else KeyState()
    st.window.resize(config.duplicate_window)
    plain = int(np.argmin(decoded.plain)) if not decoded.plain.all() else len(index)
    ends = decoded.tx_end[:plain]
    fps = _fingerprints(decoded, int(ends[-1]) if plain else 0)
    landed = _in_sequence(st, decoded, fps)
    messages = int(np.searchsorted(ends, landed, side="right"))  # whole messages only
    if messages == 0:
        return nothing
    landed = int(ends[messages - 1])
    _place(st, decoded, fps[:landed])
    consumed = index[messages] if messages < len(index) else len(items)
    newest = max([st.newest_sent, *decoded.htime[:messages].tolist(),
                  *(item.tick or 0 for item in items[:consumed] if item.value is None)])
    if newest > st.newest_sent:
        st.newest_sent, st.newest_sent_ms = newest, config.stck_ms(newest)
    st.stat.data_seen(now_ms)
    st.discard = None
    st.epoch_fresh = False
    st.count("landed", landed)
    columns = _columns(decoded, landed, [items[i] for i in index[:messages]], key, st.epoch,
                       now_ms, config.tod_offset_us)
    return FastResult(st, consumed, columns, landed)


#: messages decoded first; the chunk grows fourfold while every message in it is plain
_FIRST_CHUNK = 64


def _decode_prefix(values: list[bytes], codepage: str, cap: int) -> columnar.Transactions:
    """The key's messages up to and including its first non-plain one (or all of them).

    Why not all at once: only the leading plain run is landed here, and on a real stream it
    is often short (a status, a continuation, a STRT every few dozen messages: the
    simulator's 2 % C5 statuses give runs of ~20 messages), so decoding a 10,000-message
    batch to land its first 20 was most of the call's fast-path time. Growing chunks keep
    the all-plain case at ~1.3 decodes per message."""
    limit = _FIRST_CHUNK
    while True:
        decoded = columnar.decode(values[:limit], codepage, cap)
        if limit >= len(values) or not decoded.plain.all():
            return decoded
        limit *= 4


def _fingerprints(d: columnar.Transactions, count: int) -> list[int]:
    """``sequence.fingerprint`` of the first ``count`` transactions."""
    tx = d.tx
    return [zlib.crc32(_FINGERPRINT.pack(c, r & 0xFFFFFFFF, b & 0xFFFFFFFF))
            for c, r, b in zip(tx["urbtttim"][:count].tolist(), tx["urbtrcnt"][:count].tolist(),
                               tx["urbtdbid"][:count].tolist(), strict=True)]


def _in_sequence(st: KeyState, d: columnar.Transactions, fps: list[int]) -> int:
    """How many of the first transactions (``fps``: their fingerprints) ``sequence.classify``
    calls NEXT (the
    first BASELINE for a key without a sequence) one after the other, for sure: not in the
    duplicate window, committed after the newest commit placed before it (else a
    redelivery; a commit time 0 is no evidence), the next tsnr, a position not settled."""
    count = len(fps)
    if count == 0:
        return 0
    tsnr = d.tx["urbttsnr"][:count]
    base = st.next_u if st.next_u is not None else int(tsnr[0])
    u = base + np.arange(count, dtype=np.int64)
    ok = tsnr == (u - 1) % RING + 1  # to_tsnr
    commit = d.tx["urbtttim"][:count]
    placed = np.maximum.accumulate(commit)  # newest commit placed after each
    before = np.concatenate([[np.uint64(st.newest_commit or 0)], placed[:-1]])
    before = np.maximum(before, np.uint64(st.newest_commit or 0))
    known = np.concatenate([[st.newest_commit is not None], placed[:-1] > 0]) \
        | (st.newest_commit is not None)
    ok &= (commit == 0) | ~known | (commit > before)
    first = int(np.argmin(ok)) if not ok.all() else count
    settled = st.given_up.lowest(st.epoch, base + (st.next_u is None), base + first - 1)
    if settled is not None:
        first = settled - base
    window = st.window
    for t, (value, fp) in enumerate(zip(tsnr[:first].tolist(), fps[:first], strict=True)):
        if window.contains(value, fp):
            return t
    return first


def _place(st: KeyState, d: columnar.Transactions, fps: list[int]) -> None:
    """The sequence after the first transactions (``fps``: their fingerprints) placed as
    NEXT: the window, the next expected tsnr, the newest commit."""
    count = len(fps)
    tsnr = d.tx["urbttsnr"][:count].tolist()
    st.window.extend(list(zip(tsnr, fps, strict=True)))
    st.next_u = (st.next_u if st.next_u is not None else tsnr[0]) + count
    newest = int(d.tx["urbtttim"][:count].max())
    if newest:
        st.newest_commit = max(st.newest_commit or 0, newest)


def _columns(d: columnar.Transactions, landed: int, messages: Sequence[Incoming],
             key: tuple[str, str], epoch: int, now_ms: int, offset_us: int) -> Columns:
    """The landed transactions' three tables, as ``tables.transaction_columns`` makes them
    from ``TransactionComplete`` events (times as Unix µs, None for an unset STCK)."""
    destination, subscription = key
    tx, rec, img = d.tx, d.rec, d.img
    nrec = int(np.searchsorted(rec["tx"], landed))
    nimg = int(np.searchsorted(img["tx"], landed))
    msg_of = np.repeat(np.arange(len(messages)), (d.tx_end - d.tx_start)[:len(messages)])
    topics = [messages[m].topic for m in msg_of.tolist()]
    partitions = [messages[m].partition for m in msg_of.tolist()]
    offsets = [messages[m].offset for m in msg_of.tolist()]
    tsnr = tx["urbttsnr"][:landed].tolist()
    images = np.bincount(img["tx"][:nimg], minlength=landed)
    transactions = {
        "subscription": [subscription] * landed, "destination": [destination] * landed,
        "epoch": [epoch] * landed, "tsnr": tsnr, "dbid": tx["urbtdbid"][:landed].tolist(),
        "record_count": tx["urbtrcnt"][:landed].tolist(),
        "commit_time": _unix_us(tx["urbtttim"][:landed], offset_us),
        "processed_time": _unix_us(tx["urbtptim"][:landed], offset_us),
        "sent_time": _unix_us(d.htime[:len(messages)][msg_of], offset_us),
        "initial_state": tx["urbtinst"][:landed].tolist(), "resent": [False] * landed,
        "possibly_resent": [False] * landed, "origin": ["live"] * landed,
        "token": d.token[:landed], "topic": topics, "first_partition": partitions,
        "first_offset": offsets, "last_partition": partitions, "last_offset": offsets,
        "image_count": images.tolist(), "landed_at": [now_ms * 1000] * landed,
    }
    rec_tx, img_tx = rec["tx"][:nrec], img["tx"][:nimg]
    records = {
        **_names(subscription, destination, epoch, tx["urbttsnr"], rec_tx),
        "rsnr": rec["urbrrsnr"][:nrec].tolist(), "fnr": rec["urbrfnr"][:nrec].tolist(),
        "isn": rec["urbrisn"][:nrec].tolist(), "type": d.rec_type[:nrec],
        "resend": rec["urbrrsnd"][:nrec].tolist(), "rsp": rec["urbrrsp"][:nrec].tolist(),
        "subcode": rec["urbrsubc"][:nrec].tolist(),
        "record_time": _unix_us(rec["urbrtime"][:nrec], offset_us),
        "dcnt": rec["urbrdcnt"][:nrec].tolist(), "errc": d.rec_errc[:nrec],
    }
    images_cols = {
        **_names(subscription, destination, epoch, tx["urbttsnr"], img_tx),
        "rsnr": img["rsnr"][:nimg].tolist(), "dsnr": img["urbddsnr"][:nimg].tolist(),
        "image_type": d.img_type[:nimg], "payload": d.payloads[:nimg],
        "acode": tx["urbtacod"][img_tx].tolist(), "wcode": tx["urbtwcod"][img_tx].tolist(),
        "arc": tx["urbtarc"][img_tx].tolist(),
    }
    assert tuple(transactions) == TRANSACTION_COLUMNS
    return {"transactions": transactions,
            "records": {name: records[name] for name in RECORD_COLUMNS},
            "images": {name: images_cols[name] for name in IMAGE_COLUMNS}}


def _names(subscription: str, destination: str, epoch: int, tsnr: np.ndarray,
           of: np.ndarray) -> dict[str, list]:
    """The key columns a transaction's records and images repeat."""
    n = len(of)
    return {"subscription": [subscription] * n, "destination": [destination] * n,
            "epoch": [epoch] * n, "tsnr": tsnr[of].tolist()}


def _unix_us(stck: np.ndarray, offset_us: int) -> list[int | None]:
    """``tables.stck_to_unix_us`` over a column: 0 (not set) is None."""
    us = (stck >> np.uint64(12)).astype(np.int64) - TOD_UNIX_US - offset_us
    return [None if s == 0 else u for s, u in zip(stck.tolist(), us.tolist(), strict=True)]
