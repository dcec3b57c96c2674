"""Clocks for the simulated replicator, in microseconds since the TOD epoch (1900-01-01 UTC).

Files and tests need byte-identical output for one seed, so they run on a simulated clock that
only moves when the simulator says so. Kafka and load runs use the wall clock so that the STCK
times in the messages can measure real latency downstream.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

TOD_EPOCH = datetime(1900, 1, 1, tzinfo=UTC)
_UNIX_OFFSET_US = int((datetime(1970, 1, 1, tzinfo=UTC) - TOD_EPOCH).total_seconds()) * 1_000_000


def stck(micros: int) -> int:
    """STCK value for a TOD time in microseconds: bit 51 is one microsecond."""
    return (micros << 12) & 0xFFFFFFFFFFFFFFFF


def micros_of(when: datetime) -> int:
    """Microseconds since the TOD epoch for an aware datetime."""
    delta = when - TOD_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class Clock(Protocol):
    def now(self) -> int:
        """The current time; strictly later than any earlier answer."""

    def advance(self, micros: int) -> int:
        """Let time pass (simulated clocks only move here); returns the new time."""


class SimClock:
    """A clock that moves only when told to: deterministic output under a seed.

    It tells machine time: ``tod_offset_us`` ahead of UTC (a TOD clock with leap seconds,
    or on local time: seed 001, "About Output Message Time Stamps")."""

    def __init__(self, start: datetime, tod_offset_us: int = 0) -> None:
        self._now = micros_of(start) + tod_offset_us

    def now(self) -> int:
        self._now += 1
        return self._now

    def advance(self, micros: int) -> int:
        self._now += max(micros, 1)
        return self._now


class WallClock:
    """The machine's clock, kept strictly increasing so ordering rules between stamps hold;
    ``tod_offset_us`` ahead of UTC, like a mainframe's TOD clock (see SimClock)."""

    def __init__(self, tod_offset_us: int = 0) -> None:
        self._last = 0
        self._offset = tod_offset_us

    def now(self) -> int:
        self._last = max(self._last + 1,
                         time.time_ns() // 1000 + _UNIX_OFFSET_US + self._offset)
        return self._last

    def advance(self, micros: int) -> int:
        return self.now()
