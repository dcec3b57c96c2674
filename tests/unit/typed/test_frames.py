"""The column-wise rules of the direct typed writer (``pipeline.typed.frames``) against the
reference models (``pipeline.typed.versioning``, ``pipeline.typed.history``): any arrival order,
duplicates, deletes in both modes, tombstone retention and refresh cutoffs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.typed import apply_batch, apply_history_batch, tombstones, visible
from pipeline.typed.frames import (
    current_ops,
    greater,
    history_rows,
    last_per_group,
    merge_source,
    occurrence,
    order_key,
    since_cutoff,
    sorted_last,
    tombstones_after,
    unburied,
    with_flags,
)
from tests.unit.typed.test_versioning import T0, VALUES, arrivals

TS = pa.timestamp("us", tz="UTC")
CHANGE = pa.schema([("isn", pa.int64()), ("color", pa.string()), ("action", pa.string()),
                    ("verified", pa.bool_()), ("subscription", pa.string()),
                    ("destination", pa.string()), ("epoch", pa.int32()),
                    ("tsnr", pa.int64()), ("rsnr", pa.int64()), ("commit_time", TS),
                    ("record_type", pa.string()), ("origin", pa.string())])
ROW = ["isn", "color", "deleted", "verified", "subscription", "destination", "epoch", "tsnr",
       "rsnr", "commit_time", "record_type", "origin", "batch_id"]
TOMB = ["isn", "subscription", "destination", "epoch", "tsnr", "rsnr", "commit_time",
        "record_type", "origin", "batch_id"]
HISTORY = [*ROW, "valid_from", "valid_to", "is_current"]
SHOWN = ("color", "deleted", "verified", "commit_time", "epoch", "tsnr", "rsnr", "destination")


def _utc(t: datetime | None) -> datetime | None:
    return None if t is None else t.replace(tzinfo=UTC)


def _changes(batch: list[dict]) -> pa.Table:
    rows = [{**c, "commit_time": _utc(c["commit_time"]), "verified": c["action"] != "unverify",
             "subscription": "COLOR", "record_type": "U", "origin": "live"} for c in batch]
    return pa.Table.from_pylist(rows, schema=CHANGE)


def _empty(names: list[str], like: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([], schema=pa.schema([like.field(n) for n in names]))


def _schema() -> pa.Schema:
    base = with_flags(_changes([]), 0).schema
    return pa.schema([*base, pa.field("valid_from", TS), pa.field("valid_to", TS),
                      pa.field("is_current", pa.bool_())])


class Tables:
    """current, tombstones and history of one file, applied batch by batch with ``frames``."""

    def __init__(self, deletes: str, retention: timedelta | None,
                 cutoffs: tuple[datetime, ...] = ()) -> None:
        schema = _schema()
        self.current = _empty(ROW, schema)
        self.tombstones = _empty(TOMB, schema)
        self.history = _empty(HISTORY, schema)
        self.deletes, self.retention = deletes, retention
        self.cutoffs_us = tuple(int(_utc(c).timestamp() * 1_000_000) for c in cutoffs)

    def land(self, batch: list[dict], batch_id: int) -> None:
        changes = _changes(batch)
        source = merge_source(since_cutoff(changes, self.cutoffs_us))
        if self.deletes == "remove":
            source = unburied(source, self.current, self.tombstones)
        source = with_flags(source, batch_id)
        ops = current_ops(source, self.current, self.deletes)
        self._apply_current(source, ops)
        if self.deletes == "remove":
            stamps = [c["commit_time"] for c in batch]
            horizon = (None if self.retention is None or not stamps else int(
                (_utc(max(stamps)) - self.retention).timestamp() * 1_000_000))
            self.tombstones, _ = tombstones_after(source, self.tombstones, horizon)
        written = history_rows(self.history, with_flags(changes, batch_id), self.cutoffs_us)
        self._apply_history(written)

    def _apply_current(self, source: pa.Table, ops: np.ndarray) -> None:
        rows = {r["isn"]: r for r in self.current.to_pylist()}
        for row, op in zip(source.select(ROW).to_pylist(), ops, strict=True):
            if op == "delete":
                del rows[row["isn"]]
            elif op in ("update", "insert"):
                rows[row["isn"]] = row
        self.current = pa.Table.from_pylist(list(rows.values()), schema=self.current.schema)

    def _apply_history(self, written: pa.Table) -> None:
        def key(r: dict) -> tuple:
            return (r["isn"], r["commit_time"], r["epoch"], r["tsnr"], r["rsnr"])

        rows = {key(r): r for r in self.history.to_pylist()}
        rows.update({key(r): r for r in written.to_pylist()})
        self.history = pa.Table.from_pylist(list(rows.values()), schema=self.history.schema)


def _naive(value: Any) -> Any:
    return value.replace(tzinfo=None) if isinstance(value, datetime) else value


def _got(tables: Tables) -> dict[str, dict]:
    current = {r["isn"]: tuple(_naive(r[c]) for c in SHOWN) for r in tables.current.to_pylist()}
    tomb = {r["isn"]: (_naive(r["commit_time"]), r["epoch"], r["tsnr"], r["rsnr"])
            for r in tables.tombstones.to_pylist()}
    history = {(r["isn"], (_naive(r["commit_time"]), r["epoch"], r["tsnr"], r["rsnr"])):
               tuple(_naive(r[c]) for c in (*SHOWN, "valid_from", "valid_to", "is_current"))
               for r in tables.history.to_pylist()}
    return {"current": current, "tombstones": tomb, "history": history}


def _model(state: dict, history: dict, deletes: str) -> dict[str, dict]:
    return {"current": {i: tuple(r[c] for c in SHOWN) for i, r in visible(state, deletes).items()},
            "tombstones": tombstones(state, deletes),
            "history": {k: tuple(r[c] for c in (*SHOWN, "valid_from", "valid_to", "is_current"))
                        for k, r in history.items()}}


#: Arrow calls cost more per example than the models' dicts: no per-example deadline.
FRAMES = settings(deadline=None)


@FRAMES
@given(arrivals(), st.sampled_from(["remove", "mark"]),
       st.sampled_from([None, timedelta(seconds=1)]))
def test_any_arrival_order_lands_what_the_models_say(case, deletes, retention) -> None:
    _, batches = case
    tables = Tables(deletes, retention)
    state: dict = {}
    history: dict = {}
    for batch_id, batch in enumerate(batches):
        tables.land(batch, batch_id)
        state = apply_batch(state, batch, VALUES, deletes, retention)
        history = apply_history_batch(history, batch, VALUES)
        assert _got(tables) == _model(state, history, deletes)


@FRAMES
@given(arrivals(), st.sampled_from(["remove", "mark"]), st.integers(0, 4))
def test_a_refresh_cutoff_keeps_older_changes_out_and_closes_history(case, deletes, at) -> None:
    _, batches = case
    cutoff = T0 + timedelta(seconds=at) - timedelta(milliseconds=500)
    tables = Tables(deletes, None, (cutoff,))
    state: dict = {}
    history: dict = {}
    for batch_id, batch in enumerate(batches):
        tables.land(batch, batch_id)
        state = apply_batch(state, batch, VALUES, deletes, cutoff=cutoff)
        history = apply_history_batch(history, batch, VALUES, (cutoff,))
        assert _got(tables) == _model(state, history, deletes)


@FRAMES
@given(arrivals())
def test_history_from_a_suffix_of_the_old_rows_is_the_same(case) -> None:
    """Reading only the rows open or closed at or after the batch's earliest commit time (what
    the writer reads) writes what reading every row of the ISNs writes."""
    _, batches = case
    tables = Tables("mark", None)
    for batch_id, batch in enumerate(batches[:-1]):
        tables.land(batch, batch_id)
    last = batches[-1]
    if not last:
        return
    new = with_flags(_changes(last), 9)
    earliest = int(_utc(min(c["commit_time"] for c in last)).timestamp() * 1_000_000)
    old = tables.history
    ends = [None if v is None else int(v.timestamp() * 1_000_000)
            for v in old.column("valid_to").to_pylist()]
    suffix = old.filter(pa.array([e is None or e >= earliest for e in ends], pa.bool_()))
    full = history_rows(old, new, ())
    part = history_rows(suffix, new, ())
    assert sorted(map(repr, part.to_pylist())) == sorted(map(repr, full.to_pylist()))


def test_order_keys_put_a_null_before_any_value() -> None:
    left = pa.table({"commit_time": pa.array([None, T0.replace(tzinfo=UTC)], TS),
                     "epoch": [1, 1], "tsnr": [1, 1], "rsnr": [1, 1], "destination": ["A", "A"],
                     "verified": [True, True]})
    right = pa.table({"commit_time": pa.array([T0.replace(tzinfo=UTC), None], TS),
                      "epoch": [1, 1], "tsnr": [1, 1], "rsnr": [1, 1],
                      "destination": ["A", "A"], "verified": [True, True]})
    assert greater(order_key(left), order_key(right)).tolist() == [False, True]


def test_occurrences_count_repeated_keys_in_table_order() -> None:
    table = pa.table({"k": ["a", "b", "a", None, "a", None], "t": [0, 0, 0, 0, 1, 0]})
    assert occurrence(table, ["k", "t"]).tolist() == [1, 1, 2, 1, 1, 2]


@FRAMES
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 2),
                          st.sampled_from([1, 2, None])), max_size=30))
def test_occurrence_and_last_per_group_are_the_plain_python_ones(rows) -> None:
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.string()),
                      "t": pa.array([r[1] for r in rows], pa.int64()),
                      "v": pa.array([r[2] for r in rows], pa.int64()),
                      "i": pa.array(list(range(len(rows))), pa.int64())})
    seen: dict[tuple, int] = {}
    want = []
    for k, t, _ in rows:
        seen[(k, t)] = seen.get((k, t), 0) + 1
        want.append(seen[(k, t)])
    assert occurrence(table, ["k", "t"]).tolist() == want
    best: dict[tuple, tuple] = {}
    for i, (k, t, v) in enumerate(rows):  # greatest v, nulls first, the later of equal ones
        rank = (v is not None, v or 0, i)
        if (k, t) not in best or rank > best[(k, t)]:
            best[(k, t)] = rank
    got = last_per_group(table, ["k", "t"], ["v"]).column("i").to_pylist()
    assert sorted(got) == sorted(rank[2] for rank in best.values())
    in_order = sorted_last(table, ["k", "t"], ["v"])  # the same rows, by group
    assert sorted(in_order.column("i").to_pylist()) == sorted(got)
    keys = [((k is not None, k or ""), t) for k, t in zip(in_order.column("k").to_pylist(),
                                                           in_order.column("t").to_pylist(),
                                                           strict=True)]
    assert keys == sorted(keys)  # nulls first
