"""A batch's records and images of the configured files, on Arrow tables: points 1 and 3 of
``pipeline.spark.typed.stage`` (``pipeline.spark.typed.changes`` says them in Spark).

The input is the batch's rows of the raw ``transactions``, ``records`` and ``images`` tables as
the state tasks wrote them (the direct writer's Parquet files, in the order each call emitted
its rows). Initial-state pseudo-transactions all have tsnr 0 and restart rsnr at 1, so the n-th
tsnr-0 transaction of a key goes with the n-th occurrence of each rsnr/dsnr (``occurrence``,
counted over the table's tsnr-0 rows, before any filter; a live transaction lands once).
Each record takes its transaction's dbid, commit time (an initial-state record its read time,
``versioning.change_time``), origin and landing time; each after or before image its record's
columns.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.typed.decoding import TYPED_IMAGE_TYPES
from pipeline.typed.frames import group_starts, occurrence, sort_indices
from pipeline.typed.versioning import RSP_ISN_NOT_FOUND

if TYPE_CHECKING:
    import pyarrow as pa

KEYS = ("subscription", "destination", "epoch", "tsnr")
#: ``KEYS`` with subscription and destination as int codes (``_coded``): what rows join on.
CODED = ("_sub", "_dst", "epoch", "tsnr")
#: (subscription, dbid, fnr): one configured file.
FileKey = tuple[str, int, int]
#: Columns read from each raw table.
READ = {"transactions": (*KEYS, "dbid", "commit_time", "origin", "landed_at"),
        "records": (*KEYS, "rsnr", "fnr", "isn", "type", "rsp", "record_time"),
        "images": (*KEYS, "rsnr", "dsnr", "image_type", "payload", "acode", "wcode", "arc")}


@dataclass(frozen=True)
class FileBatch:
    """One configured file's rows of the batch: its records (with their transactions'
    columns) and its after and before images (with their records' columns), both with
    ``CODED`` and ``occ``."""

    key: FileKey
    records: pa.Table
    images: pa.Table


def _with_occurrence(table: pa.Table, *extra: str) -> pa.Table:
    """``occ`` counted over the tsnr-0 rows only: a live transaction lands once per batch
    (the state machine's rule), so its rows never repeat a key and are all the first
    occurrence; hashing every live row to find that out costs a 20,000-message batch ~1 s
    per task (URBDDSNR is unique within a record, so images never repeat one either)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    occ = np.ones(table.num_rows, np.int64)
    initial = np.flatnonzero(pc.fill_null(pc.equal(table.column("tsnr"), 0), False)
                             .to_numpy(zero_copy_only=False))
    if len(initial) > 1:
        occ[initial] = occurrence(table.take(pa.array(initial)), [*CODED, *extra])
    return table.append_column("occ", pa.array(occ))


def _in_files(table: pa.Table, files: Collection[FileKey], *, dbid: bool) -> np.ndarray:
    """Rows of ``table`` on one of ``files`` (by subscription and fnr; and dbid if asked)."""
    import pyarrow.compute as pc

    subs = table.column("subscription").to_numpy(zero_copy_only=False)
    fnrs = pc.fill_null(table.column("fnr"), -1).to_numpy(zero_copy_only=False)
    dbids = (pc.fill_null(table.column("dbid"), -1).to_numpy(zero_copy_only=False) if dbid
             else None)
    keep = np.zeros(table.num_rows, bool)
    for sub, db, fnr in files:
        hit = (subs == sub) & (fnrs == fnr)
        keep |= hit & (dbids == db) if dbids is not None else hit
    return keep


def _coded(tables: list[pa.Table]) -> list[pa.Table]:
    """The tables with ``_sub`` and ``_dst``: subscription and destination as int codes,
    the same in all of them (joins and counts on ints are several times faster)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = tables
    for name, code in (("subscription", "_sub"), ("destination", "_dst")):
        values = pc.unique(pa.chunked_array(
            [c for t in tables for c in t.column(name).chunks], pa.string()))
        out = [t.append_column(code, pc.index_in(t.column(name), value_set=values))
               for t in out]
    return out


def file_batches(transactions: pa.Table, records: pa.Table, images: pa.Table,
                 files: Collection[FileKey]) -> Iterator[FileBatch]:
    """Each of ``files`` that the batch has records of, with its rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    txs, recs, imgs = _coded([transactions.select(list(READ["transactions"])),
                              records.select(list(READ["records"])),
                              images.select(list(READ["images"]))])
    txs = _with_occurrence(txs).select(
        [*CODED, "occ", "dbid", "commit_time", "origin", "landed_at"])
    recs = _with_occurrence(recs, "rsnr")
    recs = recs.filter(pa.array(_in_files(recs, files, dbid=False)))
    if not recs.num_rows:
        return
    recs = recs.rename_columns(["record_type" if c == "type" else c for c in recs.column_names])
    recs = recs.join(txs, [*CODED, "occ"], join_type="inner")
    recs = recs.filter(pa.array(_in_files(recs, files, dbid=True)))
    read = pc.and_(pc.equal(recs.column("record_type"), "R"), pc.is_valid(recs.column(
        "record_time")))
    recs = recs.set_column(recs.schema.get_field_index("commit_time"), "commit_time",
                           pc.if_else(read, recs.column("record_time"),
                                      recs.column("commit_time"))).drop_columns(["record_time"])
    imgs = _with_occurrence(imgs, "rsnr", "dsnr").drop_columns(["subscription",
                                                                 "destination"])
    imgs = imgs.filter(pc.is_in(imgs.column("image_type"),
                                value_set=pa.array(list(TYPED_IMAGE_TYPES))))
    imgs = imgs.join(recs, [*CODED, "occ", "rsnr"], join_type="inner")
    yield from _split(recs, imgs)


def _split(recs: pa.Table, imgs: pa.Table) -> Iterator[FileBatch]:
    """The joined rows cut per file (one sort each, then slices)."""
    file_cols = ["subscription", "dbid", "fnr"]
    recs = recs.take(sort_indices(recs, file_cols))
    imgs = imgs.take(sort_indices(imgs, file_cols))
    rec_bounds = _bounds(recs, file_cols)
    img_bounds = dict(_bounds(imgs, file_cols))
    for key, (start, end) in rec_bounds:
        i0, i1 = img_bounds.get(key, (0, 0))
        yield FileBatch(key, recs.slice(start, end - start), imgs.slice(i0, i1 - i0))


def _bounds(table: pa.Table, columns: list[str]) -> list[tuple[FileKey, tuple[int, int]]]:
    if not table.num_rows:  # no rows, no groups (a file's records without typed images)
        return []
    starts = np.flatnonzero(group_starts(table, columns))
    ends = [*starts[1:].tolist(), table.num_rows]
    out = []
    for start, end in zip(starts.tolist(), ends, strict=True):
        row = table.slice(start, 1).select(columns).to_pylist()[0]
        out.append(((row["subscription"], row["dbid"], row["fnr"]), (start, end)))
    return out


def deleted_by_rsp(record_type: np.ndarray, rsp: np.ndarray) -> np.ndarray:
    """An initial-state record with response 113: the ISN no longer exists (a delete)."""
    return (record_type == "R") & (rsp == RSP_ISN_NOT_FOUND)
