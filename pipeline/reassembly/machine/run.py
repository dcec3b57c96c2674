"""``step`` and ``MachineRun``: one step of one key, the concerns joined into one run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import Event
from pipeline.reassembly.machine.failures import Failures
from pipeline.reassembly.machine.gapwork import GapWork
from pipeline.reassembly.machine.landing import Landing
from pipeline.reassembly.machine.messages import Messages
from pipeline.reassembly.machine.placing import Placing
from pipeline.reassembly.machine.statuses import Statuses
from pipeline.reassembly.machine.timers import Timers
from pipeline.reassembly.rows import ElementRow, messages
from pipeline.reassembly.state import KeyState


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one call produces. ``state`` None means: nothing to keep, drop the key's state."""

    state: KeyState | None
    events: list[Event]
    next_timeout_ms: int | None


def step(state: KeyState | None, rows: Iterable[ElementRow], now_ms: int,
         config: ReassemblyConfig, key: tuple[str, str]) -> StepResult:
    """Advance one key by a batch of rows (possibly none, when a timer fired)."""
    run = MachineRun(state, now_ms, config, key)
    run.feed(rows)
    return run.finish()


class MachineRun:
    """``step`` taken apart, for a caller that lands some of a call's messages itself (the
    fast path, ``pipeline.reassembly.fast``, between the machine's messages): begin from a
    state, ``feed`` rows, hand the state over to be changed outside between feeds, and
    ``finish`` once — timers and INST requests run exactly once per call, at the end, as in
    ``step``.

    ``state`` is the run's own copy (never the object given): whoever changes it between
    feeds must change it exactly as ``step`` would have, for the messages it took."""

    def __init__(self, state: KeyState | None, now_ms: int, config: ReassemblyConfig,
                 key: tuple[str, str]) -> None:
        st = state.clone() if state is not None else KeyState()
        st.window.resize(config.duplicate_window)
        self._run = _Run(st, config, key, now_ms)
        self._finished = False

    @property
    def state(self) -> KeyState:
        """The state as the messages fed so far left it."""
        return self._run.st

    def feed(self, rows: Iterable[ElementRow]) -> None:
        """Rows of whole messages (any order: sorted into Kafka order here), all after those
        fed before."""
        assert not self._finished, "fed after finish"
        for message in messages(rows):
            self._run.message(message)

    def replace_state(self, state: KeyState) -> None:
        """Continue from ``state``: what the messages taken outside the run left."""
        self._run.st = state

    def finish(self) -> StepResult:
        """Timers at ``now``, then the INST requests; the call's result."""
        assert not self._finished, "finished twice"
        self._finished = True
        run, st = self._run, self._run.st
        run.timers()
        run.request_initial_states()  # after timers: they may land held resends too
        return StepResult(None if st.is_empty() else st, run.events, run.next_timeout())


class _Run(Messages, Statuses, Placing, GapWork, Landing, Failures, Timers):
    """One step's working context (``context.Context``) with every concern's rules."""
