"""Engine-free reassembly of Event Replicator output: a pure state machine per key.

Public API (the Spark glue uses only these names)::

    from pipeline.reassembly import (ElementRow, ReassemblyConfig, KeyState, StepResult,
                                     step, events_to_rows)

    result = step(state, rows, now_ms, config, (destination, subscription))
    state_bytes = result.state.to_bytes() if result.state else None
    tables = events_to_rows(result.events, now_ms)

The seed rules the code cites as R1 … R14 are stated, with the seed sentence each rests on,
in ``pipeline.reassembly.machine``'s opening docstring.
"""

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    BufferLimitExceeded,
    DuplicateDropped,
    EpochStarted,
    Event,
    GapFilled,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
    ImageOut,
    Inconsistent,
    LostContinuation,
    RecordOut,
    StatusReceived,
    TransactionComplete,
)
from pipeline.reassembly.machine import MachineRun, StepResult, step
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.tables import TABLES, events_to_rows, stck_to_datetime

__all__ = [
    "TABLES",
    "BufferLimitExceeded",
    "DuplicateDropped",
    "ElementRow",
    "EpochStarted",
    "Event",
    "GapFilled",
    "GapOpened",
    "GapRequested",
    "GapUnrecoverable",
    "ImageOut",
    "Inconsistent",
    "KeyState",
    "LostContinuation",
    "MachineRun",
    "ReassemblyConfig",
    "RecordOut",
    "StatusReceived",
    "StepResult",
    "TransactionComplete",
    "events_to_rows",
    "stck_to_datetime",
    "step",
]
