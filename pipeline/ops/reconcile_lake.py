"""What ``urbpipe reconcile`` reads from the lake (delta-rs, no Spark): one file's ``current_``
rows and tombstones, the changes it landed, the replicator's answers, and the watermark.

Where the answers are: the job lands an INST answer like any initial-state record — its URBR
in ``records`` (type R; response 113 when the ISN does not exist) and its after image decoded
with the file's layout in ``changes_<sub>_<fnr>`` (record_type R, commit_time = the read time,
``pipeline.typed.versioning.change_time``). An answer counts for a round when it was read after
the lake state the round compares (newer than the ISN's row or tombstone, and than the
database's watermark when the round sent its requests): an answer to an earlier request is
older than both.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config import Layout
from pipeline.ops.lake import Lake
from pipeline.reconciliation.verdicts import Answer, LakeState, Version
from pipeline.spark.typed.tables import (
    CURRENT_META_DDL,
    changes_table,
    current_table,
    tombstones_table,
)

#: ``current_`` columns that are not the record's values.
META = frozenset({"isn", "batch_id", *(c.split()[0] for c in CURRENT_META_DDL.split(","))})
_VERSION = ("commit_time", "epoch", "tsnr", "rsnr")


def naive(value: datetime | None) -> datetime | None:
    """UTC without tzinfo: delta-rs reads Spark's timestamps with UTC, the direct writer's
    without; versions compare as naive UTC."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def _version(row: dict[str, Any]) -> Version:
    return (naive(row["commit_time"]) or datetime.min, int(row.get("epoch") or 0),
            int(row.get("tsnr") or 0), int(row.get("rsnr") or 0))


@dataclass(frozen=True)
class FileTables:
    """One configured file's typed tables (``pipeline.spark.typed.tables`` names them)."""

    lay: Layout

    @property
    def current(self) -> str:
        return current_table(self.lay)

    @property
    def changes(self) -> str:
        return changes_table(self.lay)

    @property
    def tombstones(self) -> str:
        return tombstones_table(self.lay)


def scan(lake: Lake, table: str, columns: Iterable[str] | None = None,
         where: Any = None) -> pa.Table | None:
    """The table's rows (only ``columns``, only those ``where`` keeps); None when the table
    does not exist."""
    found = lake.table(table)
    if found is None:
        return None
    names = found.schema().to_arrow().names
    wanted = [c for c in columns if c in names] if columns is not None else None
    return found.to_pyarrow_dataset().to_table(columns=wanted, filter=where, use_threads=False)


def value_fields(lake: Lake, files: FileTables) -> list[str]:
    """The record's value columns of the file's ``current_`` table, in table order."""
    found = lake.table(files.current)
    if found is None:
        return []
    return [n for n in found.schema().to_arrow().names if n not in META]


def known_isns(lake: Lake, files: FileTables) -> set[int]:
    """Every ISN the lake knows of the file: current rows, tombstones, any change landed."""
    out: set[int] = set()
    for table in (files.current, files.tombstones, files.changes):
        rows = scan(lake, table, ["isn"])
        if rows is not None:
            out.update(int(i) for i in pc.unique(rows.column("isn")).to_pylist()
                       if i is not None)
    return out


def _isin(isns: Collection[int]) -> Any:
    return pc.field("isn").isin(pa.array(sorted(isns), pa.int64()))


def lake_rows(lake: Lake, files: FileTables, isns: Collection[int],
              fields: list[str]) -> dict[int, LakeState]:
    """Each ISN's row in ``current_`` (``read_state``)."""
    return read_state(lake, files, isns, fields)[0]


def read_state(lake: Lake, files: FileTables, isns: Collection[int],
               fields: list[str]) -> tuple[dict[int, LakeState], int]:
    """Each ISN's row in ``current_`` (values, version, deleted), or its tombstone when that is
    newer (a removed ISN): a tombstone older than no row at all stands for the ISN being
    absent, the version guard's memory. And, from the same snapshot of ``current_``, the
    newest batch whose MERGE it holds (the greatest ``batch_id`` of its rows; -1: none): the
    changes of later batches are what landed after the read."""
    out: dict[int, LakeState] = {}
    applied = -1
    found = lake.table(files.current)
    if found is not None:
        data = found.to_pyarrow_dataset()
        rows = data.to_table(columns=["isn", "deleted", *_VERSION, *fields],
                             filter=_isin(isns), use_threads=False)
        for row in rows.to_pylist():
            out[int(row["isn"])] = LakeState(_version(row), bool(row.get("deleted")),
                                             {f: row.get(f) for f in fields})
        newest = pc.max(data.to_table(columns=["batch_id"], use_threads=False)
                        .column("batch_id")).as_py()
        applied = -1 if newest is None else int(newest)
    stones = scan(lake, files.tombstones, ["isn", *_VERSION], _isin(isns))
    for row in stones.to_pylist() if stones is not None else []:
        isn, version = int(row["isn"]), _version(row)
        if isn not in out or out[isn].version < version:
            out[isn] = LakeState(version, deleted=True)
    return out, applied


def landed_changes(lake: Lake, files: FileTables, isns: Collection[int], after_batch: int,
                   fields: list[str]) -> dict[int, list[LakeState]]:
    """Each ISN's changes the job landed in ``changes_`` in batches after ``after_batch``
    (the newest whose ``current_`` MERGE the lake's read held, ``read_state``): a delete (D)
    as deleted, any other record as its after image's values."""
    where = _isin(isns) & (pc.field("batch_id") > after_batch)
    rows = scan(lake, files.changes, ["isn", "record_type", "image_type", *_VERSION, *fields],
                where)
    out: dict[int, list[LakeState]] = {}
    for row in rows.to_pylist() if rows is not None else []:
        deleted = row["record_type"] == "D"
        if not deleted and row["image_type"] != "A":
            continue
        state = LakeState(_version(row), deleted, {} if deleted else
                          {f: row.get(f) for f in fields})
        out.setdefault(int(row["isn"]), []).append(state)
    return out


def answers(lake: Lake, files: FileTables, after: dict[int, datetime],
            fields: list[str]) -> dict[int, Answer]:
    """The newest landed answer per ISN read after ``after[isn]``: response 113 from
    ``records``, the record's values from ``changes_`` (an answer whose image is not in
    ``changes_`` yet has not fully landed and is left out)."""
    lay = files.lay
    # tsnr 0 first: the only statistic that skips files (a batch without a pseudo-transaction
    # has none); the rest are kept per row
    where = ((pc.field("tsnr") == 0) & _isin(after) & (pc.field("type") == "R")
             & (pc.field("fnr") == lay.fnr) & (pc.field("subscription") == lay.subscription))
    records = scan(lake, "records", ["isn", "epoch", "rsnr", "rsp", "record_time"], where)
    newest: dict[int, dict[str, Any]] = {}
    for row in records.to_pylist() if records is not None else []:
        isn, read = int(row["isn"]), naive(row["record_time"])
        if read is None or read <= after[isn]:
            continue
        if isn not in newest or naive(newest[isn]["record_time"]) < read:  # type: ignore[operator]
            newest[isn] = row
    images = _answer_images(lake, files, newest, fields)
    out: dict[int, Answer] = {}
    for isn, row in newest.items():
        read = naive(row["record_time"])
        assert read is not None
        version: Version = (read, int(row["epoch"] or 0), 0, int(row["rsnr"] or 0))
        if int(row["rsp"] or 0) == 113:
            out[isn] = Answer(isn, version, found=False)
        elif (isn, read) in images:
            out[isn] = Answer(isn, version, True, images[(isn, read)])
    return out


def _answer_images(lake: Lake, files: FileTables, newest: dict[int, dict[str, Any]],
                   fields: list[str]) -> dict[tuple[int, datetime], dict[str, Any]]:
    if not newest:
        return {}
    where = ((pc.field("tsnr") == 0) & _isin(newest) & (pc.field("record_type") == "R")
             & (pc.field("image_type") == "A"))
    rows = scan(lake, files.changes, ["isn", "commit_time", *fields], where)
    out: dict[tuple[int, datetime], dict[str, Any]] = {}
    for row in rows.to_pylist() if rows is not None else []:
        when = naive(row["commit_time"])
        assert when is not None
        out[(int(row["isn"]), when)] = {f: row.get(f) for f in fields}
    return out


@dataclass(frozen=True)
class Watermark:
    """A database's consistency watermark (``watermarks``: the earliest over its
    destinations) and whether a gap is open."""

    watermark: datetime | None
    open_gaps: int

    def passed(self, read: datetime) -> bool:
        """Every change committed before ``read`` has landed."""
        return self.open_gaps == 0 or (self.watermark is not None and self.watermark >= read)


def watermark(lake: Lake, subscription: str, dbid: int) -> Watermark:
    where = (pc.field("subscription") == subscription) & (pc.field("dbid") == dbid)
    rows = scan(lake, "watermarks", ["destination", "watermark", "open_gaps", "computed_at"],
                where)
    latest: dict[str, dict[str, Any]] = {}
    for row in rows.to_pylist() if rows is not None else []:
        dest = row["destination"]
        if dest not in latest or naive(latest[dest]["computed_at"]) < naive(  # type: ignore[operator]
                row["computed_at"]):
            latest[dest] = row
    if not latest:
        return Watermark(None, 0)
    marks = [naive(r["watermark"]) for r in latest.values()]
    low = None if any(m is None for m in marks) else min(m for m in marks if m is not None)
    return Watermark(low, sum(int(r["open_gaps"] or 0) for r in latest.values()))
