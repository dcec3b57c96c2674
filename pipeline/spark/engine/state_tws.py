"""Stateful stage on ``transformWithStateInPandas``: the candidate successor of state_stage.py.

Why it exists: ``applyInPandasWithState`` keeps one state value per key and the product rewrites
all of it (``KeyState.to_bytes``) on every call. While a huge transaction is open, that value
holds every buffered image, so each batch re-reads, re-compresses and re-checkpoints the whole
open transaction: batch time and checkpoint size grow with it (decision 0005).
``transformWithStateInPandas`` offers list state, which RocksDB appends to without rewriting.

How ``step`` (which takes and returns a whole ``KeyState``) is split, without changing it:

- ``header`` (ValueState, one binary): the ``KeyState`` with the open ``Partial``'s **images**
  left out. Everything else stays in it: sequence, window, gaps, counters, held transactions and
  the Partial's records (``step`` checks them: rsnr continuity, URBTRCNT), and ``Partial.nbytes``
  still counts every buffered byte, so ``max_buffered_bytes`` keeps working. Small: ~100 B per
  record instead of the record's payload.
- ``images`` (ListState): the open Partial's images, appended once per batch, read once when the
  transaction completes (or dropped when it is discarded).
- ``spilled`` (ValueState): which Partial the list belongs to: (epoch, tsnr, first partition,
  first offset). The first Kafka coordinates tell a new Partial of the same tsnr (a restart or a
  resend) from the one that continues, so the list is never glued to the wrong transaction.
- timers: the handle's processing-time timers; every call deletes the old ones and registers
  ``next_timeout_ms`` (the same "set or clear on every call" rule as the v1 API).

``step`` is given the header with ``partial.images == []`` and appends this batch's images to
it; the wrapper then (1) puts the stored images in front of the images of a
``TransactionComplete`` for the spilled Partial, (2) appends the images still open to the list,
(3) strips them from the header before saving it. ``step`` only ever appends to
``Partial.images`` and copies them at completion, which is what makes this split exact.

The records stay in the header, so it still grows by ~60 B of JSON per buffered record (the
images, the bulk, do not): the assembler reads ``records[-1]`` and ``len(records)``; if ``step``
kept only those two, the records could move to a ListState as well.

Not covered here (the lead decides on wiring; the state layout differs from state_stage.py, so a
switch needs a fresh checkpoint): held transactions under the "hold" gap policy keep their
images in the header (bounded by the same cap); a MapState keyed by tsnr would take them out.
Needs the RocksDB state store provider and ``protobuf>=6.33.5,<7`` in the Python environment.
"""

# Spark's callback names (handleInputRows, timerValues) are camelCase.
# ruff: noqa: N802, N803

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from pipeline.reassembly import KeyState, ReassemblyConfig
from pipeline.reassembly.events import ImageOut, TransactionComplete
from pipeline.spark.engine.decode_stage import RecordDecoder
from pipeline.spark.engine.gcpause import gc_paused
from pipeline.spark.engine.state_stage import OUTPUT_DDL, EarlyFiles, key_output, key_step
from pipeline.spark.land.datafiles import DataFiles

HEADER_DDL = "state binary"
SPILLED_DDL = "epoch long, tsnr long, first_partition int, first_offset long"
IMAGES_DDL = "rsnr long, dsnr long, image_type string, payload binary"

__all__ = ["OUTPUT_DDL", "ReassemblyProcessor"]


def _identity(st: KeyState | None) -> tuple[int, int, int, int] | None:
    """Which open Partial the images list belongs to (None: no open Partial)."""
    if st is None or st.partial is None:
        return None
    p = st.partial
    return (st.epoch, p.tsnr, int(p.first[0]), int(p.first[1]))


def _completes(event: object, spilled: tuple[int, int, int, int]) -> bool:
    return (isinstance(event, TransactionComplete)
            and (event.epoch, event.tsnr, event.first_partition, event.first_offset) == spilled)


class ReassemblyProcessor(StatefulProcessor):
    """``pipeline.reassembly.step`` per (destination, subscription), open images in ListState."""

    def __init__(self, config: ReassemblyConfig, decoder: RecordDecoder,
                 files: DataFiles | None = None, fast: bool = True) -> None:
        self.config = config
        self.decoder = decoder
        self.files = files  # the direct writer (pipeline/spark/land/datafiles.py), or None
        self.fast = fast  # the fast path (stream.fast_path, pipeline/reassembly/fast.py)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.header = handle.getValueState("header", HEADER_DDL)
        self.spilled = handle.getValueState("spilled", SPILLED_DDL)
        self.images = handle.getListState("images", IMAGES_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frames = list(rows)
        with gc_paused():  # pipeline/spark/engine/gcpause.py: a batch's garbage has no cycles
            out = self._advance(key, timerValues, frames)
        yield out

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield self._advance(key, timerValues, [])

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ internals
    def _advance(self, key: Any, timerValues: TimerValues,
                 frames: list[pd.DataFrame]) -> pd.DataFrame:
        # The batch's processing time from Spark (kept in the offset log), never the wall clock:
        # a replayed batch must produce the same output.
        now_ms = int(timerValues.getCurrentProcessingTimeInMs())
        row = self.header.get() if self.header.exists() else None
        current = KeyState.from_bytes(row[0]) if row else None
        srow = self.spilled.get() if self.spilled.exists() else None
        spilled = tuple(int(v) for v in srow) if srow else None

        # the open transaction's images are in list state, so the fast path never starts
        # from a state with one (fast.easy_state): the spilled images stay step's business
        early = EarlyFiles(self.files, now_ms, self.config.tod_offset_us) if self.files \
            else None
        try:
            return self._land(key, now_ms, current, spilled, frames, early)
        finally:
            if early is not None:
                early.close()

    def _land(self, key: Any, now_ms: int, current: KeyState | None,
              spilled: tuple[int, int, int, int] | None, frames: list[pd.DataFrame],
              early: EarlyFiles | None) -> pd.DataFrame:
        """The call's step, state and output (``early``: the direct writer's early files)."""
        done = key_step(current, frames, now_ms, self.config, (key[-2], key[-1]),
                        self.decoder, self.fast, early)
        result = done.result

        events = list(result.events)
        if spilled is not None:
            for i, event in enumerate(events):
                if _completes(event, spilled):
                    stored = tuple(ImageOut(int(r[0]), int(r[1]), r[2], bytes(r[3]))
                                   for r in self.images.get())
                    events[i] = dataclasses.replace(event, images=stored + event.images)
        self._save(result.state, spilled)
        self._arm(result.next_timeout_ms, now_ms)
        return key_output((key[-2], key[-1]), frames, done, events, now_ms, self.config,
                          self.files, early)

    def _save(self, st: KeyState | None, spilled: tuple[int, int, int, int] | None) -> None:
        """Append the open Partial's new images to the list, save the header without them."""
        now_open = _identity(st)
        if now_open != spilled:  # completed, discarded or replaced: the list is stale
            self.images.clear()
            if now_open is None:
                self.spilled.clear()
            else:
                self.spilled.update(now_open)
        if st is None:
            self.header.clear()
            return
        spill = st.take_partial_images()
        if spill:
            self.images.appendList([(i.rsnr, i.dsnr, i.image_type, i.payload) for i in spill])
        self.header.update((st.to_bytes(),))

    def _arm(self, next_timeout_ms: int | None, now_ms: int) -> None:
        """One timer at most per key: drop the old one, register the next (strictly future)."""
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        if next_timeout_ms is not None and next_timeout_ms > now_ms:
            self.handle.registerTimer(next_timeout_ms)
