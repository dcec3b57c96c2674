"""Typed tables on hand-made batches (no Kafka): the version-guarded MERGE, the tombstones of
``deletes: remove`` and the SCD type 2 history against the engine-free reference models
(pipeline.typed.apply_batch, apply_history_batch), quarantine and idempotent replays."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import Settings
from pipeline.payload import encode_payload, layout_from_conf
from pipeline.spark.engine.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.land.tables import arrow_schema, ensure_tables, table_path
from pipeline.spark.typed.stage import write_typed_tables
from pipeline.spark.typed.tables import direct_typed
from pipeline.typed import action_of, apply_batch, apply_history_batch, tombstones, visible
from pipeline.typed.versioning import change_time

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
APP = "typed-test"
VALUES = ["color", "code"]
RETENTION = timedelta(days=1)
SHOWN = ("color", "code", "deleted", "verified", "commit_time", "epoch", "tsnr", "rsnr",
         "destination")
INTERVAL = ("valid_from", "valid_to", "is_current")


def _settings(base: Settings, lake: Path) -> Settings:
    layouts = [lay.model_copy(update={"history": True, "tombstone_retention_days": 1.0})
               if lay.subscription == "COLOR" else lay for lay in base.layouts]
    return base.model_copy(update={"layouts": layouts, "stream": base.stream.model_copy(
        update={"lake_dir": str(lake)})})


class Batch:
    """Rows of the (table, json, blob) batch the state function emits, built by hand."""

    def __init__(self, settings: Settings) -> None:
        lay = next(x for x in settings.layouts if x.subscription == "COLOR")
        self.layout = layout_from_conf(lay.layout_conf())
        self.tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": []}
        self.changes: list[dict] = []  # what the reference models see

    def tx(self, tsnr: int, sec: float, records: list[tuple], *, origin: str = "live",
           epoch: int = 1, destination: str = "OUT1", read: dict[int, float] | None = None,
           gone: frozenset[int] = frozenset()) -> Batch:
        """records: (isn, type, before (color, code) | None, after | None | b'raw');
        ``read``: ISN -> second an initial-state record was read at (URBRTIME); ``gone``:
        ISNs answered with response 113 (no such ISN)."""
        names = {"subscription": "COLOR", "destination": destination, "epoch": epoch,
                 "tsnr": tsnr}
        commit = T0 + timedelta(seconds=sec)
        self.tables["transactions"].append({**names, "dbid": 10006, "record_count": len(
            records), "commit_time": commit, "origin": origin, "initial_state": tsnr == 0,
            "landed_at": T0})
        for rsnr, (isn, typ, before, after) in enumerate(records, start=1):
            record_time = (T0 + timedelta(seconds=read[isn])) if read and isn in read else None
            images = [(t, v) for t, v in (("B", before), ("A", after)) if v is not None]
            self.tables["records"].append({**names, "rsnr": rsnr, "fnr": 4, "isn": isn,
                                           "type": typ, "record_time": record_time,
                                           "dcnt": len(images),
                                           "rsp": 113 if isn in gone else 0})
            for dsnr, (t, v) in enumerate(images, start=1):
                payload = v if isinstance(v, bytes) else encode_payload(
                    {"color": v[0], "code": Decimal(v[1])}, self.layout, ebcdic=True)
                self.tables["images"].append({**names, "rsnr": rsnr, "dsnr": dsnr,
                                              "image_type": t, "payload": payload, "acode": 0,
                                              "wcode": 0, "arc": 0})
            action = action_of(typ, isinstance(after, tuple), 113 if isn in gone else 0)
            own = after if action == "upsert" else before  # a row shows its change's own image
            self.changes.append({
                "isn": isn, "action": action,
                "commit_time": change_time(typ, record_time, commit).replace(tzinfo=None),
                "epoch": epoch, "tsnr": tsnr, "rsnr": rsnr, "destination": destination,
                "color": own[0] if own else None, "code": Decimal(own[1]) if own else None})
        return self

    def frame(self, spark):
        return spark.createDataFrame(to_output({k: [dict(r) for r in v]
                                                for k, v in self.tables.items()}), OUTPUT_DDL)

    def files(self, settings: Settings, batch_id: int) -> list[dict]:
        """The batch's transactions, records and images as the direct writer's state tasks
        write them (one Parquet file per table in the raw table's folder, never committed)."""
        return direct_files(settings, self.tables, batch_id)


def direct_files(settings: Settings, tables: dict[str, list[dict]], batch_id: int) -> list[dict]:
    """``tables``' transactions, records and images as direct-writer Parquet files."""
    out = []
    for table in ("transactions", "records", "images"):
        rows = [{**r, "batch_id": batch_id} for r in tables.get(table, [])]
        if not rows:
            continue
        name = f"part-{batch_id:010d}-{uuid.uuid4().hex}.snappy.parquet"
        folder = Path(table_path(settings, table))
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(table)), folder / name)
        out.append({"table": table, "path": name, "rows": len(rows)})
    return out


def land_typed(spark, tables: dict[str, list[dict]], batch_id: int, settings: Settings,
               app: str, *, frame=None, writer: str | None = None) -> dict[str, int]:
    """``write_typed_tables`` as the job calls it with ``writer`` (default: the conf's,
    ``tables.direct_typed``: direct for a local lake). Direct: the batch's transactions,
    records and images in the state tasks' files, the rest in the (table, json, blob) frame;
    spark: all in the frame. ``frame``: the batch's frame, if the caller has it."""
    writer = writer or ("direct" if direct_typed(settings) else "spark")
    if frame is None:
        frame = spark.createDataFrame(to_output({k: [dict(r) for r in v]
                                                 for k, v in tables.items()}), OUTPUT_DDL)
    files = direct_files(settings, tables, batch_id) if writer == "direct" else None
    return write_typed_tables(spark, frame, batch_id, settings, app, files=files)


def land(spark, batch: Batch, batch_id: int, settings: Settings, app: str,
         writer: str | None = None) -> dict[str, int]:
    """``land_typed`` of a ``Batch``."""
    return land_typed(spark, batch.tables, batch_id, settings, app, writer=writer)


def _read(spark, settings: Settings, name: str) -> list:
    return spark.read.format("delta").load(table_path(settings, name)).collect()


def _tables(spark, settings: Settings) -> dict[str, dict]:
    """current, tombstones and history of COLOR/4, keyed like the models."""
    current = {r.isn: tuple(r[c] for c in SHOWN) for r in _read(spark, settings,
                                                                  "current_color_4")}
    tomb = {r.isn: (r.commit_time, r.epoch, r.tsnr, r.rsnr)
            for r in _read(spark, settings, "tombstones_color_4")}
    history = {(r.isn, (r.commit_time, r.epoch, r.tsnr, r.rsnr)): tuple(r[c] for c in (
        *SHOWN, *INTERVAL)) for r in _read(spark, settings, "history_color_4")}
    return {"current": current, "tombstones": tomb, "history": history}


def _model(state: dict[int, dict], history: dict) -> dict[str, dict]:
    return {"current": {i: tuple(r[c] for c in SHOWN)
                        for i, r in visible(state, "remove").items()},
            "tombstones": tombstones(state, "remove"),
            "history": {k: tuple(r[c] for c in (*SHOWN, *INTERVAL))
                        for k, r in history.items()}}


def _batches(settings: Settings) -> list[Batch]:
    first = (Batch(settings)
             .tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", -2)),
                         (3, "I", None, ("GREEN", 3)), (6, "I", None, ("GOLD", 6))])
             .tx(2, 20, [(1, "U", ("RED", 1), ("PINK", 11))])
             # two changes of ISN 1 in one batch, and deletes
             .tx(3, 30, [(1, "U", ("PINK", 11), ("BLACK", -111)), (3, "D", ("GREEN", 3), None),
                         (6, "D", ("GOLD", 6), None)])
             # initial state racing the live updates: two tsnr-0 pseudo-transactions
             .tx(0, 25, [(1, "R", None, ("INIT1", 0)), (2, "R", None, ("INIT2", 22))],
                 origin="initial_state")
             .tx(0, 26, [(4, "R", None, ("INIT4", -4))], origin="initial_state")
             # ISN 7 read at 24 s by a chunk stamped 25 s: the live update at 24.5 s is newer
             .tx(9, 24.5, [(7, "U", ("OLD7", 0), ("LIVE7", 7))])
             .tx(0, 25, [(7, "R", None, ("INIT7", -7))], origin="initial_state", read={7: 24})
             # ISN 8 answered 113 (no image) before a pseudo-transaction whose first record
             # has one: ISN 9's image is ISN 9's, never ISN 8's
             .tx(0, 27, [(8, "R", None, None)], origin="initial_state", gone=frozenset({8}))
             .tx(0, 28, [(9, "R", None, ("INIT9", 9))], origin="initial_state")
             # an after image that does not match the layout
             .tx(6, 31, [(5, "I", None, b"\x00" * 5)]))
    second = (Batch(settings)
              .tx(4, 15, [(2, "U", ("BLUE", -2), ("LATE", 99))])           # late: splits
              .tx(1, 10, [(1, "I", None, ("RED", 1))], destination="OUT1")   # duplicate
              .tx(5, 40, [(4, "U", ("INIT4", -4), None)], origin="resend")  # before only
              # late, older than the delete of ISN 3: the tombstone keeps it buried
              .tx(7, 28, [(3, "U", ("GREEN", 3), ("ZOMBIE", 7))]))
    # two days on: the tombstone of ISN 6 (untouched) is purged; ISN 3's delete is re-sent by
    # another destination in the same batch, so its tombstone is rewritten and kept
    third = (Batch(settings)
             .tx(8, 2 * 86_400, [(2, "U", ("LATE", 99), ("NEXT", 8))])
             .tx(3, 30, [(1, "U", ("PINK", 11), ("BLACK", -111)),
                         (3, "D", ("GREEN", 3), None)], destination="OUT2"))
    return [first, second, third]


@pytest.fixture(scope="module", params=["direct", "spark"])
def landed(request, spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    """Both writers on the same batches: the direct one (Python tasks, delta-rs) and Spark's."""
    writer = request.param
    settings = _settings(test_settings, tmp_path_factory.mktemp(f"typed-{writer}") / "lake")
    ensure_tables(spark, settings)
    batches = _batches(settings)
    counts, after = [], []
    for batch_id, batch in enumerate(batches):
        counts.append(land(spark, batch, batch_id, settings, APP, writer))
        after.append(_tables(spark, settings))
    # replay batch 2 (crash after commit), and batch 0 with other content: both skipped
    replays = [land(spark, batches[2], 2, settings, APP, writer),
               land(spark, batches[1], 0, settings, APP, writer)]
    return settings, batches, counts, after, replays


def test_tables_equal_the_reference_models_after_every_batch(spark, landed) -> None:
    _, batches, _, after, _ = landed
    state: dict[int, dict] = {}
    history: dict = {}
    for batch, got in zip(batches, after, strict=True):
        state = apply_batch(state, batch.changes, VALUES, "remove", RETENTION)
        history = apply_history_batch(history, batch.changes, VALUES)
        assert got == _model(state, history)


def test_current_state_rules(spark, landed) -> None:
    current = landed[3][1]["current"]
    assert current[1][:4] == ("BLACK", Decimal(-111), False, True)  # newest of two in a batch
    assert current[2][:4] == ("INIT2", Decimal(22), False, True)    # initial state > older live
    assert current[7][:4] == ("LIVE7", Decimal(7), False, True)     # live after the R's read
    assert 3 not in current and 6 not in current                   # deletes remove
    assert current[4][:4] == ("INIT4", Decimal(-4), False, False)   # resend: unverified
    assert current[5][:4] == (None, None, False, False)             # bad image: unverified
    assert 8 not in current and current[9][:4] == ("INIT9", Decimal(9), False, True)  # 113


def test_tombstones_bury_late_changes_until_their_retention(spark, landed) -> None:
    settings, _, _, after, _ = landed
    assert set(after[1]["tombstones"]) == {3, 6, 8}
    assert "ZOMBIE" not in {row[0] for row in after[1]["current"].values()}
    assert set(after[2]["tombstones"]) == {3}, "ISN 6 purged, ISN 3 rewritten and kept"
    assert [r.destination for r in _read(spark, settings, "tombstones_color_4")] == ["OUT2"]


def test_history_splits_intervals_for_late_changes(spark, landed) -> None:
    history = landed[3][2]["history"]
    isn2 = sorted((k[1], v) for k, v in history.items() if k[0] == 2)
    colors = [(v[0], v[-1]) for _, v in isn2]
    assert colors == [("BLUE", False), ("LATE", False), ("INIT2", False), ("NEXT", True)]
    # the late change at 15 s split BLUE's interval [10 s, 25 s)
    split = (T0 + timedelta(seconds=15)).replace(tzinfo=None)
    assert isn2[0][1][-2] == isn2[1][1][-3] == split
    deleted = [v for k, v in history.items() if k[0] == 3 and v[2]]
    assert len(deleted) == 1 and deleted[0][0] == "GREEN" and deleted[0][-1]


def test_replays_are_idempotent(spark, landed, request) -> None:
    settings, batches, counts, after, _ = landed
    assert _tables(spark, settings) == after[-1]
    changes = spark.read.format("delta").load(table_path(settings, "changes_color_4"))
    good = [i for b in batches for i in b.tables["images"] if i["payload"] != b"\x00" * 5]
    assert changes.count() == len(good)
    assert sum(c["changes_color_4"] for c in counts) == len(good)
    if request.node.callspec.params["landed"] == "direct":  # where its typed step went
        phases = {"read", "decode", "changes", "current", "history"}
        for c in counts:
            assert {f"t_typed_task_{p}_ms" for p in phases} | {"t_typed_plan_ms",
                                                                 "t_typed_job_ms"} <= set(c)
            assert c["t_typed_job_ms"] > 0



def test_each_writer_reports_each_files_cost(landed) -> None:
    """Per file and batch: its wall time, and the rows its commits copied unchanged (none
    into empty tables; some once a batch changes ISNs of a file that holds others): the
    direct writer from delta-rs's MERGE and its own history rewrite, the Spark way from
    each MERGE commit's ``numTargetRowsCopied``."""
    counts = landed[2]
    for c in counts:
        assert [k for k in c if k.startswith("typed_ms:")] == ["typed_ms:COLOR/10006/4"]
        assert c["typed_ms:COLOR/10006/4"] > 0
    copied = [c["typed_copied:COLOR/10006/4"] for c in counts]
    assert copied[0] == 0, "batch 0 landed into empty tables"
    assert max(copied[1:]) > 0, copied
    replayed = [c.get("typed_copied:COLOR/10006/4") for c in landed[4]]
    assert replayed == [0, 0], f"a replay copies nothing: {replayed}"


def test_bad_image_is_quarantined_and_initial_state_rows_keep_their_isn(spark, landed) -> None:
    settings = landed[0]
    q = _read(spark, settings, "quarantine")
    assert [(r.source, r.tsnr, bytes(r.raw)) for r in q] == [("payload", 6, b"\x00" * 5)]
    assert "layout COLOR/10006/4" in q[0].reason
    changes = spark.read.format("delta").load(table_path(settings, "changes_color_4"))
    init = {(r.isn, r.color) for r in changes.where("tsnr = 0").collect()}
    assert init == {(1, "INIT1"), (2, "INIT2"), (4, "INIT4"), (7, "INIT7"), (9, "INIT9")}


def _crash(*_args, **_kwargs) -> None:
    raise RuntimeError("killed between the MERGEs")


def _crash_after_current(spark, settings: Settings, batch: Batch, batch_id: int, writer: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Land ``batch`` with the job dying after the current table's commit, before the
    tombstones' (Spark: the MERGE; direct: the task's rewrite, run here in-process)."""
    if writer == "spark":
        import pipeline.spark.typed.stage as typed

        monkeypatch.setattr(typed, "merge_tombstones", _crash)
        write_typed_tables(spark, batch.frame(spark), batch_id, settings, APP)
        return
    import pipeline.spark.typed.file_writer as file_writer

    monkeypatch.setattr(file_writer, "_rewrite_tombstones", _crash)
    _land_in_process(settings, batch, batch_id)


def _land_in_process(settings: Settings, batch: Batch, batch_id: int) -> None:
    """The direct writer's task for every file, run in this process (monkeypatches reach
    it; the Spark job's Python workers are other processes)."""
    import pipeline.spark.typed.file_writer as file_writer
    from pipeline.spark.typed.direct import file_plan, raw_inputs
    from pipeline.spark.typed.tables import decode_spec

    plans = tuple(file_plan(settings, lay, decode_spec(settings, lay), ())
                  for lay in settings.layouts)
    inputs = {t: tuple(path for path, _ in found)
              for t, found in raw_inputs(settings, batch.files(settings, batch_id)).items()}
    list(file_writer.land_work(file_writer.TypedWork(plans, inputs, batch_id, APP)))


@pytest.mark.parametrize("writer", ["direct", "spark"])
def test_a_crash_between_the_merges_is_repaired_by_the_replay(
        spark, test_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        writer: str) -> None:
    """The current MERGE of a batch commits, the job dies before the tombstone and history
    MERGEs; the replay of that batch (same id) must land exactly what one clean run lands."""
    settings = _settings(test_settings, tmp_path / "lake")
    ensure_tables(spark, settings)
    first = (Batch(settings).tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2)),
                                        (3, "I", None, ("GOLD", 3))])
             .tx(2, 15, [(3, "D", ("GOLD", 3), None)]))
    # deletes ISN 1, updates ISN 2, revives ISN 3 (its tombstone must go)
    second = Batch(settings).tx(3, 20, [(1, "D", ("RED", 1), None),
                                        (2, "U", ("BLUE", 2), ("PINK", 3)),
                                        (3, "I", None, ("BACK", 4))])
    land(spark, first, 0, settings, APP, writer)
    with monkeypatch.context() as patched, pytest.raises(RuntimeError):
        _crash_after_current(spark, settings, second, 1, writer, patched)
    assert 1 not in _tables(spark, settings)["current"], "the current MERGE did commit"
    land(spark, second, 1, settings, APP, writer)
    state = apply_batch(apply_batch({}, first.changes, VALUES, "remove"), second.changes,
                        VALUES, "remove")
    history = apply_history_batch(apply_history_batch({}, first.changes, VALUES),
                                  second.changes, VALUES)
    assert _tables(spark, settings) == _model(state, history)
    assert set(tombstones(state, "remove")) == {1}


def test_a_crash_between_the_current_merge_and_its_inserts_is_repaired_by_the_replay(
        spark, test_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct writer lands a batch's updates and deletes of the current table by a MERGE
    and its many inserts (``SPLIT_INSERTS``, one here) by an append, the batch's txn on the
    append: the job dying between the two, the replay must add the inserts and nothing
    twice."""
    import pipeline.spark.typed.file_writer as file_writer

    settings = _settings(test_settings, tmp_path / "lake")
    ensure_tables(spark, settings)
    first = Batch(settings).tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2))])
    second = Batch(settings).tx(2, 20, [(1, "D", ("RED", 1), None),
                                        (2, "U", ("BLUE", 2), ("PINK", 3)),
                                        (5, "I", None, ("LIME", 5))])
    land(spark, first, 0, settings, APP, "direct")
    append = file_writer._append

    def crash_on_current(table, *args, **kwargs):
        if "current_" in table.table_uri:
            _crash()
        append(table, *args, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(RuntimeError):
        patched.setattr(file_writer, "_append", crash_on_current)
        patched.setattr(file_writer, "SPLIT_INSERTS", 1)
        _land_in_process(settings, second, 1)
    current = _tables(spark, settings)["current"]
    assert 1 not in current and current[2][0] == "PINK", "the MERGE did commit"
    assert 5 not in current, "the inserts did not"
    land(spark, second, 1, settings, APP, "direct")
    state = apply_batch(apply_batch({}, first.changes, VALUES, "remove"), second.changes,
                        VALUES, "remove")
    history = apply_history_batch(apply_history_batch({}, first.changes, VALUES),
                                  second.changes, VALUES)
    assert _tables(spark, settings) == _model(state, history)


@pytest.mark.parametrize(("writer", "repair"), [("direct", False), ("spark", False),
                                                ("direct", True)])
def test_the_answers_of_reconcile_repair_unless_told_not_to(
        spark, test_settings: Settings, tmp_path: Path, writer: str, repair: bool) -> None:
    """An answer of ``urbpipe reconcile`` (origin 'reconcile') is in ``changes_`` (the round
    compares it); by default it repairs the row (a history row with origin 'reconcile'), with
    ``reconcile.repair: false`` it never changes ``current_`` or the history. An initial-state
    answer of the job's own INST always does."""
    base = _settings(test_settings, tmp_path / "lake")
    settings = base.model_copy(update={"reconcile": base.reconcile.model_copy(
        update={"repair": repair})})
    ensure_tables(spark, settings)
    batch = (Batch(settings)
             .tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2))])
             .tx(0, 20, [(1, "R", None, ("FIXED", 1))], origin="reconcile")
             .tx(0, 21, [(2, "R", None, ("INIT", 2))], origin="initial_state"))
    land(spark, batch, 0, settings, APP, writer)
    current = {r.isn: r.color for r in _read(spark, settings, "current_color_4")}
    assert current == {1: "FIXED" if repair else "RED", 2: "INIT"}
    changes = {(r.isn, r.color, r.origin) for r in _read(spark, settings, "changes_color_4")
               if r.tsnr == 0}
    assert changes == {(1, "FIXED", "reconcile"), (2, "INIT", "initial_state")}
    history = {(r.isn, r.color, r.origin) for r in _read(spark, settings, "history_color_4")}
    assert ((1, "FIXED", "reconcile") in history) == repair
    assert (2, "INIT", "initial_state") in history
