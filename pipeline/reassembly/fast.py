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
from pipeline.reassembly.sequence import to_tsnr
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
    decoded = columnar.decode([items[i].value for i in index], codepage,  # type: ignore[misc]
                              config.max_buffered_bytes)
    st = state.clone() if state is not None else KeyState()
    st.window.resize(config.duplicate_window)
    sequence = _Sequence(st, decoded)
    consumed, newest, messages = 0, st.newest_sent, 0
    for n, item in enumerate(items):
        if item.value is None:
            newest = max(newest, item.tick or 0)
            consumed = n + 1
            continue
        if not decoded.plain[messages] or not sequence.take(messages):
            break
        newest = max(newest, int(decoded.htime[messages]))
        messages += 1
        consumed = n + 1
    if messages == 0:
        return nothing
    if newest > st.newest_sent:
        st.newest_sent, st.newest_sent_ms = newest, config.stck_ms(newest)
    st.stat.data_seen(now_ms)
    st.discard = None
    st.epoch_fresh = False
    landed = int(decoded.tx_end[messages - 1])
    st.count("landed", landed)
    columns = _columns(decoded, landed, [items[i] for i in index[:messages]], key, st.epoch,
                       now_ms, config.tod_offset_us)
    return FastResult(st, consumed, columns, landed)


class _Sequence:
    """``sequence.classify`` for the easy case, transaction by transaction: NEXT (BASELINE)
    or not easy. A message's transactions are all taken, or none."""

    def __init__(self, st: KeyState, decoded: columnar.Transactions) -> None:
        self.st, self.d = st, decoded
        tx = decoded.tx
        self.tsnr = tx["urbttsnr"].tolist()
        self.commit = tx["urbtttim"].tolist()
        self.rcnt = tx["urbtrcnt"].tolist()
        self.dbid = tx["urbtdbid"].tolist()

    def take(self, message: int) -> bool:
        st = self.st
        start, end = int(self.d.tx_start[message]), int(self.d.tx_end[message])
        next_u, newest = st.next_u, st.newest_commit
        taken: list[tuple[int, int]] = []
        for t in range(start, end):
            tsnr, commit = self.tsnr[t], self.commit[t]
            fp = zlib.crc32(_FINGERPRINT.pack(commit, self.rcnt[t] & 0xFFFFFFFF,
                                              self.dbid[t] & 0xFFFFFFFF))
            if st.window.contains(tsnr, fp):
                return False
            if commit and newest is not None and commit <= newest:
                return False  # a redelivery (or, behind a gap, something else): step decides
            if next_u is None:
                u = tsnr  # BASELINE
            else:
                u = next_u
                if to_tsnr(u) != tsnr or st.given_up.find(st.epoch, u) is not None:
                    return False
            next_u = u + 1
            if commit:
                newest = max(newest or 0, commit)
            taken.append((tsnr, fp))
        for tsnr, fp in taken:
            st.window.add(tsnr, fp)
        st.next_u, st.newest_commit = next_u, newest
        return True


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
