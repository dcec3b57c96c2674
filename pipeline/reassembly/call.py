"""One call of one key: the fast path and the machine taken turn about over the key's rows.

Engine-free: the rows come as plain tuples of the decode stage's columns (``ROW_COLUMNS``:
topic, partition, offset, part, error, value) and the caller gives a ``Decode`` that turns
the rows the machine must take into its element rows (and codec rejections). The Spark stage
only converts its frames to those tuples (``pipeline.spark.engine.state_stage``).

Every run of easy messages (and ticks) goes through the fast path (``fast.Resume``), the rest
through one machine run (``machine.MachineRun``): the same rows and state as ``step`` alone
(tests/unit/integration/test_fast_path.py). The fast path is tried at the start and again after
every message the machine takes while the state is easy (no partial, gap or hold): a status
every few dozen messages then costs one message on the machine, not the rest of the call.
Rows the fast path cannot read (echoes, routing errors, control rows) go to the machine in
their place, and the fast path resumes after them; timers run once, at the end. The fast
path's transactions come ahead of the events' in the transactions/records/images tables
(row order there differs from ``step`` alone's; Delta tables have none); rejections keep the
order ``step`` alone gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.fast import Incoming, Resume
from pipeline.reassembly.landed import LandedRun, landed_columns
from pipeline.reassembly.machine import MachineRun, StepResult
from pipeline.reassembly.rows import TICK_PART, ElementRow, pseudo_rows
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.tables import Columns

#: The decode stage's columns a call reads, in this order (a row of ``run_call``).
ROW_COLUMNS = ("topic", "partition", "offset", "part", "error", "value")
#: The fast path's landed transactions one call keeps as columns before ``flush`` (the
#: direct writer's early Parquet files) takes them: what a call holds is bounded by this,
#: not by its batch (a transaction's three tables' rows cost ~4 KB: 25,000 hold ~100 MB).
#: The rows the machine lands are not, so a busy key's batch must reach the fast path.
FLUSH_TRANSACTIONS = 25_000

#: Rows at the given positions → the machine's element rows and the codec's rejections.
Decode = Callable[[Sequence[int]], tuple[list[ElementRow], list[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class CallResult:
    """One call's work for one key: ``step``'s result, the transactions the fast path landed
    ahead of its events (their tables' columns; None: none) and the rows the codec
    rejected."""

    result: StepResult
    landed: Columns | None
    rejected: list[dict[str, Any]]


def run_call(current: KeyState | None, rows: Sequence[tuple[Any, ...]], decode: Decode,
             now_ms: int, config: ReassemblyConfig, key: tuple[str, str], codepage: str,
             flush: Callable[[Columns], None] | None = None) -> CallResult:
    """The key's rows (``ROW_COLUMNS``, any order) through the fast path and one machine run.

    ``decode``: the machine's rows at positions of ``rows``; ``flush``: given the fast
    path's landed columns whenever ``FLUSH_TRANSACTIONS`` have gathered (``landed`` holds
    the rest)."""
    order = sorted(range(len(rows)), key=lambda i: _kafka_order(rows[i]))
    items = _fast_items([rows[i] for i in order])
    run = MachineRun(current, now_ms, config, key)
    machine = _MachineFeed(run, decode)
    landed = _Landed(flush, key, now_ms, config.tod_offset_us)
    pos = 0
    for start, end in _readable_runs(items):
        machine.feed(order[pos:start])  # rows the fast path cannot read, in their place
        readable = [item for item in items[start:end] if item is not None]
        _fast_run(readable, order[start:end], run, machine, landed,
                  Resume(readable, now_ms, config, key, codepage))
        pos = end
    machine.feed(order[pos:])
    return CallResult(run.finish(), landed.columns(), machine.rejected())


def _fast_run(items: list[Incoming], positions: list[int], run: MachineRun,
              machine: _MachineFeed, landed: _Landed, fast_path: Resume) -> None:
    """One run of readable items (``positions``: their rows): the fast path takes what it
    can from each position, the machine the message there (and the ticks after it)."""
    at = 0
    while at < len(items):
        taken = fast_path.take(run.state, at)
        if taken.consumed:
            assert taken.state is not None and taken.run is not None
            run.replace_state(taken.state)
            landed.add(taken.run)
            at += taken.consumed
            continue
        after = at + 1  # the message, and the ticks after it (the fast path starts at one)
        while after < len(items) and items[after].value is None:
            after += 1
        machine.feed(positions[at:after])
        at = after


class _Landed:
    """The fast path's landed runs of one call as they gather; ``flush`` (if any) takes
    their columns every ``FLUSH_TRANSACTIONS`` (built per chunk: ``landed.landed_columns``)."""

    def __init__(self, flush: Callable[[Columns], None] | None, key: tuple[str, str],
                 now_ms: int, offset_us: int) -> None:
        self._flush, self._key, self._now, self._offset = flush, key, now_ms, offset_us
        self._runs: list[LandedRun] = []
        self._held = 0

    def add(self, run: LandedRun) -> None:
        self._runs.append(run)
        self._held += run.transactions
        if self._flush is not None and self._held >= FLUSH_TRANSACTIONS:
            self._flush(self.columns())  # type: ignore[arg-type]
            self._runs, self._held = [], 0

    def columns(self) -> Columns | None:
        """The columns of the runs not flushed yet (None: none)."""
        if not self._runs:
            return None
        return landed_columns(self._runs, self._key, self._now, self._offset)


def _readable_runs(items: list[Incoming | None]) -> list[tuple[int, int]]:
    """[start, end) of each run of items the fast path can read (``_fast_items``)."""
    runs, start = [], 0
    for readable, group in groupby(items, key=lambda item: item is not None):
        end = start + sum(1 for _ in group)
        if readable:
            runs.append((start, end))
        start = end
    return runs


class _MachineFeed:
    """The rows the call leaves to the machine: decoded (``Decode``) and fed to the run,
    their rejections kept by row position (``rejected``: in the order of the rows given, as
    a call without the fast path gives them)."""

    def __init__(self, run: MachineRun, decode: Decode) -> None:
        self._run, self._decode = run, decode
        self._rejected: list[tuple[int, list[dict[str, Any]]]] = []

    def feed(self, positions: Sequence[int]) -> None:
        """The rows at ``positions``, fed to the run at once."""
        if not positions:
            return
        elements: list[ElementRow] = []
        for i in positions:
            e, r = self._decode([i])
            elements.extend(e)
            if r:
                self._rejected.append((i, r))
        self._run.feed(elements)

    def rejected(self) -> list[dict[str, Any]]:
        return [row for _, rows in sorted(self._rejected, key=lambda p: p[0]) for row in rows]


def _kafka_order(row: tuple[Any, ...]) -> tuple[int, int, str, bool]:
    """``ElementRow.message_key``'s order: a pseudo row after the message at its offset."""
    topic, partition, offset, part = row[:4]
    return (int(partition), int(offset), topic, int(part) < 0)


def _fast_items(rows: list[tuple[Any, ...]]) -> list[Incoming | None]:
    """Each row (``ROW_COLUMNS``) as the fast path reads it: a message of one key (``part``
    0, no routing error) or a tick; None for any other row (an echo of a destination-wide
    STRT/REST, a routing error, a control row …), which the machine takes in its place
    before the fast path resumes — a batch that begins with a STRT still goes the fast way
    after it."""
    items: list[Incoming | None] = []
    for topic, partition, offset, part, error, value in rows:
        coords = (topic, int(partition), int(offset))
        if part == 0 and error is None and value is not None:
            items.append(Incoming(*coords, value=bytes(value)))
        elif part == TICK_PART:
            row = pseudo_rows(*coords, value, part)[0]
            items.append(Incoming(*coords, tick=row.num("htime")))
        else:
            items.append(None)
    return items
