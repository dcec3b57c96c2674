"""The fast path's landed transactions as table columns, built per decoded chunk, not per try.

Why: the fast path is tried again after every message the machine takes (``fast.Resume``),
and on a stream with a status every few messages a try lands only a handful of
transactions. Building the ~46 columns of the three tables at every try, then joining
thousands of such pieces, would be a fifth of a busy key's call (decision 0010). A try
notes what it landed — a range of one
decoded chunk's transactions and the key's epoch then (``LandedRun``) — and
``landed_columns`` builds the columns of many runs at once: per chunk, one selection mask
and one fancy index per column.

The columns are those ``tables.transaction_columns`` makes from ``TransactionComplete``
events, in the same order (run after run, each run's transactions in message order), the
numeric ones as numpy arrays (``column``), times as Unix µs, masked where a STCK is unset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from pipeline.reassembly import columnar
from pipeline.reassembly.column import Column, concat
from pipeline.reassembly.tables import (
    IMAGE_COLUMNS,
    RECORD_COLUMNS,
    TRANSACTION_COLUMNS,
    Columns,
)
from pipeline.urb.stck import TOD_UNIX_US


@dataclass(frozen=True, eq=False)
class Chunk:
    """One ``columnar.decode`` of a key's messages and where each message came from (per
    decoded message: its Kafka topic, partition and offset). Compared by identity: the runs
    of one chunk are built together."""

    decoded: columnar.Transactions
    topics: np.ndarray       # object (str)
    partitions: np.ndarray   # int64
    offsets: np.ndarray      # int64

    @classmethod
    def of(cls, decoded: columnar.Transactions,
           coordinates: Sequence[tuple[str, int, int]]) -> Chunk:
        topics = np.empty(len(coordinates), dtype=object)
        topics[:] = [c[0] for c in coordinates]
        return cls(decoded, topics,
                   np.array([c[1] for c in coordinates], dtype=np.int64),
                   np.array([c[2] for c in coordinates], dtype=np.int64))


@dataclass(frozen=True, slots=True)
class LandedRun:
    """Transactions ``[t0, t1)`` of ``chunk`` (its own numbering), landed by one try while
    the key was in ``epoch``."""

    chunk: Chunk
    t0: int
    t1: int
    epoch: int

    @property
    def transactions(self) -> int:
        return self.t1 - self.t0


def landed_columns(runs: Sequence[LandedRun], key: tuple[str, str], now_ms: int,
                   offset_us: int) -> Columns:
    """The three tables' columns of ``runs`` (at least one), in run order."""
    parts = [_chunk_columns(chunk, list(group), key, now_ms, offset_us)
             for chunk, group in groupby(runs, key=lambda run: run.chunk)]
    first = parts[0]
    return {table: {name: concat([part[table][name] for part in parts]) for name in cols}
            for table, cols in first.items()}


def _chunk_columns(chunk: Chunk, runs: list[LandedRun], key: tuple[str, str], now_ms: int,
                   offset_us: int) -> Columns:
    """The columns of one chunk's runs (ascending, not overlapping)."""
    destination, subscription = key
    d = chunk.decoded
    tx, rec, img = d.tx, d.rec, d.img
    ntx = len(tx["urbttsnr"])
    chosen = np.zeros(ntx, dtype=bool)
    epochs = np.zeros(ntx, dtype=np.int64)
    for run in runs:
        chosen[run.t0:run.t1] = True
        epochs[run.t0:run.t1] = run.epoch
    t = np.flatnonzero(chosen)
    r = np.flatnonzero(chosen[rec["tx"]])
    i = np.flatnonzero(chosen[img["tx"]])
    rec_tx, img_tx = rec["tx"][r], img["tx"][i]
    msg_of = np.repeat(np.arange(len(d.tx_start)), d.tx_end - d.tx_start)[t]
    n = len(t)
    partitions, offsets = chunk.partitions[msg_of], chunk.offsets[msg_of]
    transactions = {
        "subscription": _repeat(n, subscription), "destination": _repeat(n, destination),
        "epoch": epochs[t], "tsnr": _ints(tx["urbttsnr"][t]), "dbid": _ints(tx["urbtdbid"][t]),
        "record_count": _ints(tx["urbtrcnt"][t]),
        "commit_time": _unix_us(tx["urbtttim"][t], offset_us),
        "processed_time": _unix_us(tx["urbtptim"][t], offset_us),
        "sent_time": _unix_us(d.htime[msg_of], offset_us),
        "initial_state": tx["urbtinst"][t].astype(bool),
        "resent": np.zeros(n, dtype=bool), "possibly_resent": np.zeros(n, dtype=bool),
        "origin": _repeat(n, "live"), "token": d.token[t], "topic": chunk.topics[msg_of],
        "first_partition": partitions, "first_offset": offsets,
        "last_partition": partitions.copy(), "last_offset": offsets.copy(),
        "image_count": np.bincount(img_tx, minlength=ntx)[t].astype(np.int64),
        "landed_at": np.full(n, now_ms * 1000, dtype=np.int64),
    }
    records = {
        **_names(subscription, destination, epochs, tx["urbttsnr"], rec_tx),
        "rsnr": _ints(rec["urbrrsnr"][r]), "fnr": _ints(rec["urbrfnr"][r]),
        "isn": _ints(rec["urbrisn"][r]), "type": d.rec_type[r],
        "resend": rec["urbrrsnd"][r].astype(bool), "rsp": _ints(rec["urbrrsp"][r]),
        "subcode": _ints(rec["urbrsubc"][r]),
        "record_time": _unix_us(rec["urbrtime"][r], offset_us),
        "dcnt": _ints(rec["urbrdcnt"][r]), "errc": d.rec_errc[r],
    }
    images = {
        **_names(subscription, destination, epochs, tx["urbttsnr"], img_tx),
        "rsnr": _ints(img["rsnr"][i]), "dsnr": _ints(img["urbddsnr"][i]),
        "image_type": d.img_type[i], "payload": d.payloads[i],
        "acode": _ints(tx["urbtacod"][img_tx]), "wcode": _ints(tx["urbtwcod"][img_tx]),
        "arc": _ints(tx["urbtarc"][img_tx]),
    }
    assert tuple(transactions) == TRANSACTION_COLUMNS
    return {"transactions": transactions,
            "records": {name: records[name] for name in RECORD_COLUMNS},
            "images": {name: images[name] for name in IMAGE_COLUMNS}}


def _names(subscription: str, destination: str, epochs: np.ndarray, tsnr: np.ndarray,
           of: np.ndarray) -> dict[str, Column]:
    """The key columns a transaction's records and images repeat (``of``: their
    transactions)."""
    n = len(of)
    return {"subscription": _repeat(n, subscription), "destination": _repeat(n, destination),
            "epoch": epochs[of], "tsnr": _ints(tsnr[of])}


def _ints(values: np.ndarray) -> np.ndarray:
    """A DSECT field's column as int64 (a copy: the decoded chunk is not kept alive)."""
    return values.astype(np.int64)


def _repeat(n: int, text: str) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out[:] = text
    return out


def _unix_us(stck: np.ndarray, offset_us: int) -> np.ndarray:
    """``tables.stck_to_unix_us`` over a column: 0 (not set) is masked (None)."""
    out = (stck >> np.uint64(12)).astype(np.int64) - TOD_UNIX_US - offset_us
    unset = stck == 0
    return np.ma.MaskedArray(out, mask=unset) if unset.any() else out
