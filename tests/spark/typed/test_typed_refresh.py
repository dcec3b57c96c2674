"""A refresh file (AUTI URBSU X'48') against the typed MERGEs, on hand-made batches (no Kafka).

The refresh truncates ``current_color_4``, clears the older tombstones and closes the open
history intervals at its cutoff; a change committed before the cutoff that arrives later (late
batch, resend) never comes back, a change after it lands, and replays change nothing. The job
runs the typed tables first and the lifecycle then (``landing_steps``); the other order must
give the same tables. Checked against the reference models (``pipeline.typed``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipeline.config import Settings
from pipeline.spark.land.tables import ensure_tables
from pipeline.spark.typed.lifecycle import apply_lifecycle
from pipeline.typed import apply_batch, history_of, truncate
from pipeline.urb import make_element
from tests.e2e.test_lifecycle import _status
from tests.spark.typed.test_typed_merge import (
    T0,
    VALUES,
    Batch,
    _model,
    _settings,
    _tables,
    land_typed,
)

APP = "refresh-test"
REFRESH_SEC = 20
CUT = (T0 + timedelta(seconds=REFRESH_SEC)).replace(tzinfo=None)


def _batches(settings: Settings) -> list[Batch]:
    before = (Batch(settings)
              .tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2)),
                          (3, "I", None, ("GOLD", 3))])
              .tx(2, 12, [(3, "D", ("GOLD", 3), None)]))                # a tombstone
    # the refresh, with a late pre-refresh change and a post-refresh insert in its batch
    refresh = (Batch(settings)
               .tx(3, 15, [(2, "U", ("BLUE", 2), ("LATE", 15))])
               .tx(4, 25, [(4, "I", None, ("NEW", 4))]))
    refresh.tables["status_events"] = [
        _status("AUTI", REFRESH_SEC, detail=make_element("URBSU", urbsutyp=0x48))]
    after = (Batch(settings)
             .tx(5, 18, [(1, "U", ("RED", 1), ("ZOMBIE", 18))])         # late, pre-refresh
             .tx(1, 10, [(1, "I", None, ("RED", 1))], destination="OUT2")  # resent original
             .tx(6, 30, [(2, "I", None, ("POST", 30))]))                # post-refresh
    return [before, refresh, after]


def _run(spark, batch: Batch, batch_id: int, settings: Settings, lifecycle_first: bool) -> None:
    frame = batch.frame(spark)

    def typed(spark, frame, batch_id, settings, app) -> None:
        land_typed(spark, batch.tables, batch_id, settings, app, frame=frame)

    steps = [typed, apply_lifecycle]
    for step in reversed(steps) if lifecycle_first else steps:
        if step is apply_lifecycle and "status_events" not in batch.tables:
            continue  # its landing step runs it only for batches with status events
        step(spark, frame, batch_id, settings, APP)


@pytest.fixture(scope="module", params=[False, True], ids=["typed_first", "lifecycle_first"])
def refreshed(request, spark, test_settings: Settings,
              tmp_path_factory: pytest.TempPathFactory):
    settings = _settings(test_settings, tmp_path_factory.mktemp("refresh") / "lake")
    ensure_tables(spark, settings)
    batches = _batches(settings)
    after = []
    for batch_id, batch in enumerate(batches):
        _run(spark, batch, batch_id, settings, request.param)
        after.append(_tables(spark, settings))
    for batch_id in (1, 2):  # replays after a crash: Delta skips what committed
        _run(spark, batches[batch_id], batch_id, settings, request.param)
    return settings, batches, after, _tables(spark, settings)


def _expected(batches: list[Batch]) -> dict[str, dict]:
    """The models: batch 0, the refresh's batch, truncate, then batch 2 under the cutoff."""
    first, refresh, late = (b.changes for b in batches)
    state = apply_batch({}, first, VALUES, "remove")
    state = truncate(apply_batch(state, refresh, VALUES, "remove"), CUT)
    state = apply_batch(state, late, VALUES, "remove", cutoff=CUT)
    return _model(state, history_of([*first, *refresh, *late], VALUES, (CUT,)))


def test_refresh_truncates_and_clears_the_tombstones(refreshed) -> None:
    _, _, after, _ = refreshed
    assert set(after[0]["current"]) == {1, 2} and set(after[0]["tombstones"]) == {3}
    assert {i: r[0] for i, r in after[1]["current"].items()} == {4: "NEW"}, (
        "the pre-refresh rows and the batch's own late pre-refresh change are gone")
    assert after[1]["tombstones"] == {}


def test_a_late_pre_refresh_change_does_not_come_back_a_post_refresh_one_lands(
        refreshed) -> None:
    _, _, after, _ = refreshed
    current = {i: r[0] for i, r in after[2]["current"].items()}
    assert current == {2: "POST", 4: "NEW"}
    assert after[2]["tombstones"] == {}


def test_history_intervals_are_closed_at_the_cutoff(refreshed) -> None:
    _, _, after, _ = refreshed
    base = T0.replace(tzinfo=None)
    # (isn, second of valid_from) -> (color, deleted, seconds to valid_to or None, is_current)
    rows = {(k[0], (v[-3] - base).seconds): (
        v[0], v[2], None if v[-2] is None else (v[-2] - base).seconds, v[-1])
        for k, v in after[2]["history"].items()}
    assert rows == {
        (1, 10): ("RED", False, 18, False), (1, 18): ("ZOMBIE", False, REFRESH_SEC, False),
        (2, 10): ("BLUE", False, 15, False), (2, 15): ("LATE", False, REFRESH_SEC, False),
        (2, 30): ("POST", False, None, True),
        (3, 10): ("GOLD", False, 12, False), (3, 12): ("GOLD", True, REFRESH_SEC, False),
        (4, 25): ("NEW", False, None, True)}


def test_tables_equal_the_models_and_replays_change_nothing(refreshed) -> None:
    _, batches, after, replayed = refreshed
    assert after[2] == _expected(batches)
    assert replayed == after[2]


def test_file_cutoffs_reads_the_refresh_from_file_status(spark, refreshed) -> None:
    from pipeline.spark.typed.stage import file_cutoffs

    settings = refreshed[0]
    micros = int((T0.timestamp() + REFRESH_SEC) * 1_000_000)
    assert file_cutoffs(spark, settings) == {(10006, 4): (micros,)}
