"""Direct typed writer, task side: one configured file's batch into its typed tables, from a
Python task, through delta-rs (the ``deltalake`` package) — no Spark job, no JVM commit.

Why: a Spark MERGE costs ~20 small Spark jobs and a JVM commit about 0.1 s with a
checkpoint of 2-4 s every tenth (measured on the 2-core machine, BENCHMARKS.md "Typed tables
over a files axis"); a file's batch makes four commits (changes, current, tombstones,
history), so a subscription of 50 files spent minutes per batch whatever its size. delta-rs
commits in ~10-30 ms and MERGEs a small table in ~50 ms from the task, and the tasks of one
Spark job land all files at once, one file after another per task.

What a file's batch does (the rules are ``pipeline.typed.frames``; the Spark path, which
``pipeline.spark.typed.stage`` keeps for a lake Python cannot write, says them in SQL):

1. its after and before images decoded (``pipeline.typed.decoding``); good ones appended to
   ``changes_…``, bad ones handed back for ``quarantine`` (the driver appends them);
2. one change per record; the current table's rows of the ISNs touched, and the tombstones,
   read; the newest change per ISN since the latest refresh cutoff, unburied, MERGEd into
   ``current_…`` as ``update``/``insert``/``delete`` decided here (delta-rs writes the change
   feed of ``delta.enableChangeDataFeed`` itself);
3. with ``deletes: remove`` the tombstone table rewritten when it changed (it is small);
4. with ``history`` the files holding a version of the touched ISNs that can change (open,
   or closed at or after the batch's earliest change) rewritten with the new or changed
   versions (``pipeline.spark.typed.history_files``).

Exactly once, as the Spark path: each commit carries Delta's ``txn`` action (app id
``<app>-<table>``, version = batch id), the same pair delta-spark's txnAppId writes, and a
table whose ``txn`` for the app id is at the batch already is skipped. A crash between two
commits is repaired by the replay: the MERGE sources are the same before and after the
commits that landed (``frames.unburied``, and history reads no other typed table).

A file whose tables carry a table feature delta-rs cannot write (``typeWidening``, after a
column was widened in place) is not touched: the driver lands it the Spark way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.reassembly.pseudo import RECONCILE_ORIGIN as RECONCILE
from pipeline.spark.typed.history_files import land_history
from pipeline.typed.batch_rows import (
    READ,
    RECORD_ROW,
    FileBatch,
    FileKey,
    deleted_by_rsp,
    file_batches,
)
from pipeline.typed.decoding import DecodeSpec, VersionedSpec, decode_table
from pipeline.typed.frames import (
    DELETE,
    META,
    ORDER,
    UNVERIFY,
    UPSERT,
    current_ops,
    merge_source,
    since_cutoff,
    sorted_last,
    tombstones_after,
    unburied,
    with_flags,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("urbpipe.typed")
#: The change key columns of a ``changes_`` row (``tables.CHANGE_KEYS_DDL``), before values.
CHANGE_KEYS = ("subscription", "destination", "epoch", "tsnr", "rsnr", "dsnr", "isn",
               "record_type", "image_type", "commit_time", "origin")
#: Inserts beside updates or deletes from which a current table's inserts go by an append of
#: their own rather than in the MERGE (``_write_current``).
SPLIT_INSERTS = 5_000
#: Table features the writer leaves to Spark (delta-rs 1.6 writes neither).
SPARK_ONLY_FEATURES = frozenset({"typeWidening", "typeWidening-preview", "deletionVectors",
                                 "columnMapping"})


@dataclass(frozen=True)
class FilePlan:
    """What a task needs to land one configured file's batch (pickled into the task)."""

    key: FileKey
    label: str                                # "COLOR/10006/4", for quarantine reasons
    tables: Mapping[str, tuple[str, str]]     # kind -> (table name, path)
    spec: DecodeSpec | VersionedSpec
    deletes: str
    retention_us: int | None
    cutoffs_us: tuple[int, ...] = ()
    repair: bool = True  # reconcile.repair: answers of urbpipe reconcile reach current/history


@dataclass(frozen=True)
class TypedWork:
    """One task's share of a batch: its files, and the batch's raw Parquet files to read."""

    plans: tuple[FilePlan, ...]
    inputs: Mapping[str, tuple[str, ...]]     # raw table -> the batch's data files (paths)
    batch_id: int
    app_id: str


@dataclass
class FileResult:
    """What landing one file gave: rows per table, the bad images, or that Spark must."""

    key: FileKey
    counts: dict[str, int] = field(default_factory=dict)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    spark: bool = False
    #: task milliseconds by phase (read, decode, changes, current, history; the last three
    #: run together, ``_land_file``): the driver reports their sums as
    #: ``counts.t_typed_task_<phase>_ms``, to see where a batch went
    times_ms: dict[str, float] = field(default_factory=dict)
    #: the file's own wall time in the task, and the unchanged rows its current and history
    #: commits copied into new files (copy-on-write: the cost that grows with the tables,
    #: not the batch); the driver reports both per file (``urbpipe_typed_file_seconds``,
    #: ``urbpipe_typed_rows_copied``)
    wall_ms: float = 0.0
    rows_copied: int = 0


def land_work(work: TypedWork) -> Iterator[FileResult]:
    """The task: read the batch's rows once, then land each planned file that has records."""
    plans = {plan.key: plan for plan in work.plans}
    clock = _Clock()
    raw = {name: _read(name, work.inputs.get(name, ()))
           for name in ("transactions", "records", "images")}
    for batch in file_batches(raw["transactions"], raw["records"], raw["images"], plans):
        clock.lap("read")  # the task's read and the file's split: on its first result
        plan = plans[batch.key]
        tables = _open(plan)
        if tables is None:
            yield FileResult(batch.key, spark=True, records=batch.records.num_rows)
            continue
        started = time.perf_counter()
        result = _land_file(plan, tables, batch, work, clock)
        result.wall_ms = (time.perf_counter() - started) * 1000
        result.times_ms = clock.take()
        yield result


class _Clock:
    """Milliseconds per phase since the last ``take``."""

    def __init__(self) -> None:
        self._at = time.perf_counter()
        self._ms: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self._ms[phase] = self._ms.get(phase, 0.0) + (now - self._at) * 1000
        self._at = now

    def add(self, phase: str, ms: float) -> None:
        """Time measured elsewhere (a thread of the task)."""
        self._ms[phase] = self._ms.get(phase, 0.0) + ms

    def skip(self) -> None:
        """Start the next lap now, the time since the last one counted already (``add``)."""
        self._at = time.perf_counter()

    def take(self) -> dict[str, float]:
        out, self._ms = self._ms, {}
        return out


def _read(table: str, paths: Sequence[str]) -> pa.Table:
    """The batch's rows of one raw table (the columns the typed step reads), file after
    file in the order given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.spark.land.tables import arrow_schema

    columns = list(READ[table])
    schema = arrow_schema(table)
    empty = pa.schema([schema.field(c) for c in columns]).empty_table()
    parts = [empty, *(pq.read_table(path, columns=columns) for path in paths)]
    return pa.concat_tables(parts, promote_options="default")


#: delta-rs tables of this worker process, by path. Loading one replays its log (~5 ms, more
#: as the log grows); a worker lands the same files batch after batch, so it keeps them and
#: brings each up to date with the commits since (``update_incremental``).
_TABLES: dict[str, Any] = {}


def _table(path: str) -> Any:
    from deltalake import DeltaTable

    table = _TABLES.get(path)
    if table is not None:
        try:
            table.update_incremental()
            return table
        except Exception:  # replaced under us (dropped, made again): load it afresh
            del _TABLES[path]
    table = DeltaTable(path)
    _TABLES[path] = table
    return table


def _open(plan: FilePlan) -> dict[str, Any] | None:
    """Each table of the file as a delta-rs table; None when one of them has a feature the
    writer leaves to Spark."""
    out = {}
    for kind, (_, path) in plan.tables.items():
        try:
            table = _table(path)
        except Exception as exc:  # delta-rs refuses to load a table with an unknown feature
            if any(f in str(exc) for f in SPARK_ONLY_FEATURES):
                return None
            raise
        protocol = table.protocol()
        features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
        if features & SPARK_ONLY_FEATURES:
            return None
        out[kind] = table
    return out


def _land_file(plan: FilePlan, tables: dict[str, Any], batch: FileBatch,
               work: TypedWork, clock: _Clock) -> FileResult:
    """Decode the file's images, then write its tables: the change append, the current
    MERGE (with its tombstones) and the history in three threads. They are different Delta
    tables, each committed on its own (a replay skips what landed, in any order: the
    module docstring), and most of their time is in Arrow, Parquet and delta-rs, outside
    the GIL: a task whose file is larger than its neighbour's uses the core the neighbour
    left idle (decision 0021). Their phase times overlap (each is its own wall time)."""
    import pyarrow as pa

    result = FileResult(batch.key, records=batch.records.num_rows)
    changes_schema = _schema(tables["changes"])
    values = [c for c in plan.spec.columns if c in changes_schema.names]
    decoded, errors = _decode(batch.images, plan.spec, changes_schema, values)
    clock.lap("decode")
    good = decoded.filter(pa.array([e is None for e in errors], pa.bool_()))
    bad_rows = [i for i, e in enumerate(errors) if e is not None]
    name = plan.tables["changes"][0]
    result.counts[name] = good.num_rows
    result.counts[f"quarantine_{name}"] = len(bad_rows)
    result.quarantine = _quarantine(batch.images, bad_rows, errors, plan, work.batch_id)
    steps: dict[str, Callable[[], int]] = {
        "changes": lambda: _append_changes(plan, tables["changes"], good, values,
                                           changes_schema, work)}
    if values:  # a file with no layout yet has no value columns to MERGE
        changes = record_changes(*_repairing(batch.records, good, plan.repair), values)
        clock.lap("current")
        steps["current"] = lambda: _merge_current(plan, tables, changes, work)
        if "history" in tables:
            steps["history"] = lambda: _merge_history(plan, tables["history"], changes, work)
    with ThreadPoolExecutor(len(steps), thread_name_prefix="typed") as pool:
        timed = {phase: pool.submit(_timed, step) for phase, step in steps.items()}
        for phase, future in timed.items():
            ms, copied = future.result()
            clock.add(phase, ms)
            result.rows_copied += copied
    clock.skip()
    return result


def _timed(step: Callable[[], int]) -> tuple[float, int]:
    """A step's milliseconds and the rows it copied."""
    started = time.perf_counter()
    copied = step()
    return (time.perf_counter() - started) * 1000, copied


def _append_changes(plan: FilePlan, table: Any, good: pa.Table, values: list[str],
                    schema: pa.Schema, work: TypedWork) -> int:
    """The decoded images into ``changes_…`` (key columns, batch id, values); an append
    copies nothing (0)."""
    import pyarrow as pa

    if not good.num_rows:
        return 0
    rows = good.select(list(CHANGE_KEYS)).append_column(
        "batch_id", pa.array(np.full(good.num_rows, work.batch_id, np.int64)))
    for v in values:
        rows = rows.append_column(v, good.column(v))
    _append(table, rows.select(schema.names).cast(schema), _app(work, "changes", plan),
            work.batch_id)
    return 0


def _repairing(records: pa.Table, images: pa.Table, repair: bool
               ) -> tuple[pa.Table, pa.Table]:
    """The records whose change reaches the current table and the history, and their
    images: without the repair (``reconcile.repair: false``) not the answers of ``urbpipe
    reconcile`` (the images' ``RECORD_ROW`` then counts the kept records)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if repair:
        return records, images
    keep = pc.fill_null(pc.not_equal(records.column("origin"), RECONCILE), True).to_numpy(
        zero_copy_only=False)
    moved = np.cumsum(keep) - 1  # a kept record's row among the kept ones
    rows = images.column(RECORD_ROW).to_numpy()
    mine = keep[rows]
    images = images.filter(pa.array(mine))
    images = images.set_column(images.schema.get_field_index(RECORD_ROW), RECORD_ROW,
                               pa.array(moved[rows[mine]], pa.int64()))
    return records.filter(pa.array(keep)), images


def _app(work: TypedWork, kind: str, plan: FilePlan) -> str:
    return f"{work.app_id}-{plan.tables[kind][0]}"


def _schema(table: Any) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def _writer_properties(schema: pa.Schema) -> Any:
    """delta-rs Parquet settings: a dictionary only for the columns worth one (the raw
    tables' rule, ``datafiles.dictionary_columns``). By default delta-rs tries one for every
    column and falls back for ISNs, sequence numbers and times: EMPLOYEE's 213,264 changes
    of a 20,000-message batch took 214 ms to write, 152 ms so, in files 1.6 % larger."""
    from deltalake import ColumnProperties, WriterProperties

    from pipeline.spark.land.datafiles import dictionary_columns

    return WriterProperties(
        compression="SNAPPY", default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={name: ColumnProperties(dictionary_enabled=True)
                           for name in dictionary_columns(schema)})


def _landed(table: Any, app_id: str, batch_id: int) -> bool:
    version = table.transaction_version(app_id)
    return version is not None and version >= batch_id


def _commit(app_id: str, batch_id: int) -> Any:
    from deltalake.transaction import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id, int(batch_id))])


def _append(table: Any, rows: pa.Table, app_id: str, batch_id: int) -> None:
    from deltalake import write_deltalake

    if _landed(table, app_id, batch_id):
        log.info("batch %s already in %s: skipped", batch_id, table.table_uri)
        return
    write_deltalake(table, rows, mode="append", commit_properties=_commit(app_id, batch_id),
                    writer_properties=_writer_properties(rows.schema))


def _decode(images: pa.Table, spec: DecodeSpec | VersionedSpec, schema: pa.Schema,
            values: list[str]) -> tuple[pa.Table, list[str | None]]:
    """The images with their value columns in the table's types, and each one's error
    (no images: none, the columns still there for the records' changes)."""
    columns, errors = decode_table(images, spec, {v: schema.field(v).type for v in values})
    for v in values:
        images = images.append_column(v, columns[v])
    return images, errors


def _quarantine(images: pa.Table, bad: list[int], errors: list[str | None], plan: FilePlan,
                batch_id: int) -> list[dict[str, Any]]:
    """The ``quarantine`` rows of the undecodable images (``changes.quarantine_rows``)."""
    rows = []
    for i in bad:
        img = images.slice(i, 1).to_pylist()[0]
        details = {k: img[k] for k in ("fnr", "isn", "rsnr", "dsnr", "record_type",
                                        "image_type") if img[k] is not None}
        rows.append({
            "source": "payload", "subscription": img["subscription"],
            "destination": img["destination"], "epoch": img["epoch"], "tsnr": img["tsnr"],
            "reason": f"layout {plan.label}: {errors[i]}", "topic": None, "partition": None,
            "offset": None, "elem_index": img["rsnr"], "eye": "URBD", "raw": img["payload"],
            "fields_json": json.dumps(details, separators=(",", ":")),
            "quarantined_at": img["landed_at"], "batch_id": batch_id})
    return rows


def record_changes(records: pa.Table, good: pa.Table, values: list[str]) -> pa.Table:
    """One change per record: its action and the values of its own image (the after image
    of an upsert, the before image of a delete or an unverify; ``changes.record_changes``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    picks = _images_of(records.num_rows, good)
    record_type = records.column("record_type").to_numpy(zero_copy_only=False)
    rsp = pc.fill_null(records.column("rsp"), 0).to_numpy(zero_copy_only=False)
    has_after = pc.is_valid(picks["A"]).to_numpy(zero_copy_only=False)
    action = np.where((record_type == "D") | deleted_by_rsp(record_type, rsp), DELETE,
                      np.where(has_after, UPSERT, UNVERIFY)).astype(object)
    use_after = pa.array(action == UPSERT)
    out = records.select(["isn"])
    for v in values:
        column = good.column(v)
        out = out.append_column(v, pc.if_else(use_after, column.take(picks["A"]),
                                              column.take(picks["B"])))
    out = out.append_column("action", pa.array(action, pa.string()))
    out = out.append_column("verified", pa.array(action != UNVERIFY))
    for c in META:
        out = out.append_column(c, records.column(c))
    return out


def _images_of(records: int, images: pa.Table) -> dict[str, pa.Array]:
    """For each kind (A, B), the row in ``images`` of each record's image of that kind:
    the one of greatest dsnr (``frames.sorted_last``: nulls first, the later row of equal
    ones); null where the record has none. Images name their record by ``RECORD_ROW``
    (``batch_rows``): a sort of numbers, no join."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = pa.table({RECORD_ROW: images.column(RECORD_ROW),
                     "_before": pc.equal(images.column("image_type"), "B"),
                     "dsnr": images.column("dsnr"),
                     "_at": pa.array(np.arange(images.num_rows, dtype=np.int64))})
    chosen = sorted_last(keys, [RECORD_ROW, "_before"], ["dsnr"])
    rows = chosen.column(RECORD_ROW).to_numpy()
    before = chosen.column("_before").to_numpy(zero_copy_only=False)
    at = chosen.column("_at").to_numpy()
    out = {}
    for kind, is_before in (("A", False), ("B", True)):
        mine = before == is_before
        index = np.full(records, -1, np.int64)
        index[rows[mine]] = at[mine]
        out[kind] = pa.array(index, mask=index < 0)
    return out


def _read_keys(table: Any, isns: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The table's rows of these ISNs (files pruned by their ISN statistics): only the ISN
    and the order key (``frames.ORDER``), all that deciding each change's op needs. The value
    columns are most of a row; reading them made this ~5x slower (300 ms for EMPLOYEE's
    141,000 rows against 60)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    schema = _schema(table)
    names = ["isn", *ORDER]
    where = ds.field("isn").isin(isns)
    rows = table.to_pyarrow_dataset().to_table(columns=names, filter=where)
    return rows.cast(pa.schema([schema.field(n) for n in names]))


def _merge_current(plan: FilePlan, tables: dict[str, Any], changes: pa.Table,
                   work: TypedWork) -> int:
    """The current table and, with ``deletes: remove``, its tombstones (points 2 and 3);
    the current table's rows the MERGE copied."""
    source = merge_source(since_cutoff(changes, plan.cutoffs_us))
    current = tables["current"]
    cur = _read_keys(current, source.column("isn"))
    tomb_table = tables.get("tombstones")
    tombs = tomb_table.to_pyarrow_table().cast(_schema(tomb_table)) if tomb_table else None
    if plan.deletes == "remove" and tombs is not None:
        source = unburied(source, cur, tombs)
    source = with_flags(source, work.batch_id)
    ops = current_ops(source, cur, plan.deletes)
    app = _app(work, "current", plan)
    copied = 0
    if not _landed(current, app, work.batch_id):
        copied = _write_current(current, source.select(_schema(current).names), ops, app,
                                work.batch_id)
    if tomb_table is not None and tombs is not None:
        _rewrite_tombstones(plan, tomb_table, tombs, source, changes, work)
    return copied


def _write_current(table: Any, source: pa.Table, ops: np.ndarray, app_id: str,
                   batch_id: int) -> int:
    """The ops decided (``frames.current_ops``) into the current table. Many inserts beside
    updates or deletes are split off into an append: an append reads nothing of the table,
    and a MERGE joins the whole table whatever its source (a batch of EMPLOYEE: 209 updates
    and 25,856 inserts, 636 ms as one MERGE, 385 split). Fewer than ``SPLIT_INSERTS`` stay in
    the one MERGE: a second commit costs more than they do (50 files at 2,000 msgs/batch,
    a few hundred rows each: the split made the typed step ~1 s longer).
    The batch's ``txn`` goes on the last commit only: a replay after a crash between the two
    decides the ops again against the table the first left, where what it wrote is no
    longer newer (``current_ops``: no op), so only the rest is written. The change feed
    stays exact: the MERGE writes its own, and an append's rows are its inserts.
    Returns the rows the MERGE copied unchanged (delta-rs's ``num_target_rows_copied``)."""
    import pyarrow as pa

    schema = _schema(table)
    rows = source.cast(schema)
    inserts = ops == "insert"
    others = (ops == "update") | (ops == "delete")
    n_inserts = int(np.count_nonzero(inserts))
    split = n_inserts > 0 and (n_inserts >= SPLIT_INSERTS or not others.any())
    merged = others if split else others | inserts
    changed = rows.filter(pa.array(merged))
    copied = 0
    if changed.num_rows:
        changed = changed.append_column("_op", pa.array(ops[merged], pa.string()))
        copied = _merge(table, changed, "t.isn = s.isn", app_id, batch_id, last=not split,
                        delete="s._op = 'delete'", update="s._op = 'update'",
                        insert="s._op = 'insert'")
    if split:
        _append(table, rows.filter(pa.array(inserts)), app_id, batch_id)
    return copied


def _rewrite_tombstones(plan: FilePlan, table: Any, old: pa.Table, source: pa.Table,
                        changes: pa.Table, work: TypedWork) -> None:
    """The tombstone table after the batch, written over the old one when it changed (the
    table holds only removed ISNs within their retention: small)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    app = _app(work, "tombstones", plan)
    if _landed(table, app, work.batch_id):
        return
    newest = pc.max(pc.cast(changes.column("commit_time"), pa.int64())).as_py()
    horizon = (None if newest is None or plan.retention_us is None
               else newest - plan.retention_us)
    after, changed = tombstones_after(source, old, horizon)
    if changed:
        write_deltalake(table, after, mode="overwrite",
                        writer_properties=_writer_properties(after.schema),
                        commit_properties=_commit(app, work.batch_id))


def _merge_history(plan: FilePlan, table: Any, changes: pa.Table, work: TypedWork) -> int:
    """Point 4: the versions of the touched ISNs that are new or whose interval changed
    (``history_files``: only the files holding them are rewritten); the rows it copied."""
    app = _app(work, "history", plan)
    if not changes.num_rows or _landed(table, app, work.batch_id):
        return 0
    return land_history(table, with_flags(changes, work.batch_id), plan.cutoffs_us, app,
                        work.batch_id, _commit(app, work.batch_id)).copied


def _merge(table: Any, source: pa.Table, on: str, app_id: str, batch_id: int, *,
           last: bool = True, update: str | None = None, insert: str | None = None,
           delete: str | None = None) -> int:
    """A delta-rs MERGE writing every target column from the source (``_op`` aside); with
    ``last`` its commit carries the batch's ``txn``. Returns the target rows it copied."""
    names = list(_schema(table).names)
    assign = {f'"{n}"': f's."{n}"' for n in names}
    commit = _commit(app_id, batch_id) if last else None
    merge = table.merge(source, on, source_alias="s", target_alias="t",
                        writer_properties=_writer_properties(source.schema),
                        commit_properties=commit)
    if delete is not None:
        merge = merge.when_matched_delete(delete)
    if update is not None:
        merge = merge.when_matched_update(assign, update)
    if insert is not None:
        merge = merge.when_not_matched_insert(assign, insert)
    return int(merge.execute().get("num_target_rows_copied") or 0)
