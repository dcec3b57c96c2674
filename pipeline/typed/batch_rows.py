"""A batch's records and images of the configured files, on Arrow tables: points 1 and 3 of
``pipeline.spark.typed.stage`` (``pipeline.spark.typed.changes`` says them in Spark).

The input is the batch's rows of the raw ``transactions``, ``records`` and ``images`` tables as
the state tasks wrote them (the direct writer's Parquet files, in the order each call emitted
its rows). Initial-state pseudo-transactions all have tsnr 0 and restart rsnr at 1, so their
rows are told apart by position (``occ``: the n-th pseudo-transaction of a key, counted over
the table's tsnr-0 rows in order, before any filter; a live transaction lands once, occ 1):
the n-th tsnr-0 transaction; the records from each rsnr 1 on (a pseudo-transaction's records
are numbered 1, 2 …, however many it has); the images by their records' URBRDCNT, in order
(a record answered with response 113 has none, so counting images per rsnr would hand the
next pseudo-transaction's image to it: ``pseudo_occurrence``).
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
#: What a file is (``FileKey``'s columns).
FILE_COLUMNS = ["subscription", "dbid", "fnr"]
#: An image's column: the row of its record in its ``FileBatch.records``.
RECORD_ROW = "_rec"
#: Columns read from each raw table.
READ = {"transactions": (*KEYS, "dbid", "commit_time", "origin", "landed_at"),
        "records": (*KEYS, "rsnr", "fnr", "isn", "type", "rsp", "record_time", "dcnt"),
        "images": (*KEYS, "rsnr", "dsnr", "image_type", "payload", "acode", "wcode", "arc")}


@dataclass(frozen=True)
class FileBatch:
    """One configured file's rows of the batch: its records (with their transactions'
    columns) and its after and before images (with their records' columns, and
    ``RECORD_ROW``: their record's row in ``records``), both with ``CODED`` and ``occ``."""

    key: FileKey
    records: pa.Table
    images: pa.Table


def _initial_rows(table: pa.Table) -> np.ndarray:
    """Positions of the tsnr-0 rows, ordered by key and then table order (a stable sort)."""
    import pyarrow as pa

    initial = np.flatnonzero(_is_initial(table))
    if len(initial) < 2:
        return initial
    return initial[sort_indices(table.take(pa.array(initial)), CODED)]


def _with_occurrence(table: pa.Table) -> pa.Table:
    """Transactions: ``occ`` counted over the tsnr-0 rows only. A live transaction lands once
    per batch (the state machine's rule), so its rows never repeat a key and are all the
    first occurrence; hashing every live row to find that out costs a 20,000-message batch
    ~1 s per task."""
    import pyarrow as pa

    occ = np.ones(table.num_rows, np.int64)
    initial = np.flatnonzero(_is_initial(table))
    if len(initial) > 1:
        occ[initial] = occurrence(table.take(pa.array(initial)), CODED)
    return table.append_column("occ", pa.array(occ))


def _is_initial(table: pa.Table) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(table.column("tsnr"), 0), False).to_numpy(
        zero_copy_only=False)


def pseudo_occurrence(records: pa.Table, images: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """``occ`` of each record and image (module docstring): a key's tsnr-0 records start a
    new pseudo-transaction at each rsnr that does not follow the one before; its tsnr-0
    images are its records' URBRDCNT images, record by record. Images that do not line up
    with their records (counts or rsnr differ: never for what the state machine lands) get
    occ 0 and join no record: an image is never handed to another record's ISN."""
    import pyarrow as pa

    rec_occ = np.ones(records.num_rows, np.int64)
    img_occ = np.ones(images.num_rows, np.int64)
    recs = _initial_rows(records)
    imgs = _initial_rows(images)
    if not len(recs):
        img_occ[imgs] = 0
        return rec_occ, img_occ
    initial = records.take(pa.array(recs))  # only the tsnr-0 rows are converted
    keys = _key_codes(initial)
    rsnr = _ints(initial, "rsnr")
    new = np.ones(len(recs), bool)
    new[1:] = (keys[1:] != keys[:-1]) | (rsnr[1:] <= rsnr[:-1])
    count = np.cumsum(new)
    first = np.maximum.accumulate(np.where(_starts(keys), np.arange(len(recs)), 0))
    ordinal = count - count[first] + 1
    rec_occ[recs] = ordinal
    dcnt = np.maximum(_ints(initial, "dcnt"), 0)
    want_key, want_rsnr = np.repeat(keys, dcnt), np.repeat(rsnr, dcnt)
    placed = images.take(pa.array(imgs))
    if (len(want_key) == len(imgs) and np.array_equal(want_key, _key_codes(placed))
            and np.array_equal(want_rsnr, _ints(placed, "rsnr"))):
        img_occ[imgs] = np.repeat(ordinal, dcnt)
    else:
        img_occ[imgs] = 0
    return rec_occ, img_occ


def _ints(table: pa.Table, name: str) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.fill_null(table.column(name), -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _key_codes(table: pa.Table) -> np.ndarray:
    """One int per row for its (subscription, destination, epoch): equal keys, equal ints."""
    sub, dst, epoch = (_ints(table, c) for c in ("_sub", "_dst", "epoch"))
    return (sub << 42) ^ (dst << 21) ^ epoch


def _starts(keys: np.ndarray) -> np.ndarray:
    starts = np.ones(len(keys), bool)
    starts[1:] = keys[1:] != keys[:-1]
    return starts


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
    rec_occ, img_occ = pseudo_occurrence(recs, imgs)
    recs = recs.append_column("occ", pa.array(rec_occ)).drop_columns(["dcnt"])
    imgs = imgs.append_column("occ", pa.array(img_occ))
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
    recs = _by_file(recs, FILE_COLUMNS)
    recs = recs.append_column(RECORD_ROW, pa.array(np.arange(recs.num_rows, dtype=np.int64)))
    # the payloads stay out of the join (its biggest column): each image keeps its row
    # number, and its payload is taken once, in file order (``_split``)
    payloads = imgs.column("payload")
    imgs = imgs.drop_columns(["subscription", "destination", "payload"]).append_column(
        "_img", pa.array(np.arange(imgs.num_rows, dtype=np.int64)))
    imgs = imgs.filter(pc.is_in(imgs.column("image_type"),
                                value_set=pa.array(list(TYPED_IMAGE_TYPES))))
    imgs = imgs.join(recs, [*CODED, "occ", "rsnr"], join_type="inner")
    yield from _split(recs, imgs, payloads)


def _split(recs: pa.Table, imgs: pa.Table, payloads: pa.ChunkedArray
           ) -> Iterator[FileBatch]:
    """The joined rows cut per file (records already in file order, the images sorted
    once, then slices); the images get their payloads back, and their ``RECORD_ROW``
    counted from their file's first record."""
    import pyarrow as pa
    import pyarrow.compute as pc

    imgs = _by_file(imgs, FILE_COLUMNS)
    imgs = imgs.append_column("payload", payloads.take(imgs.column("_img"))).drop_columns(
        ["_img"])
    img_bounds = dict(_bounds(imgs, FILE_COLUMNS))
    rows = imgs.schema.get_field_index(RECORD_ROW)
    for key, (start, end) in _bounds(recs, FILE_COLUMNS):
        i0, i1 = img_bounds.get(key, (0, 0))
        mine = imgs.slice(i0, i1 - i0)
        mine = mine.set_column(rows, RECORD_ROW, pc.subtract(mine.column(RECORD_ROW),
                                                             pa.scalar(start, pa.int64())))
        yield FileBatch(key, recs.slice(start, end - start).drop_columns([RECORD_ROW]), mine)


def _by_file(table: pa.Table, columns: list[str]) -> pa.Table:
    """The rows in file order; as they are when they are all of one file (a task's
    subscription of one file: no copy)."""
    if group_starts(table, columns).sum() <= 1:
        return table
    return table.take(sort_indices(table, columns))


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
