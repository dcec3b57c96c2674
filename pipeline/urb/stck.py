"""IBM STCK (store clock) time-of-day values.

The replicator stamps messages, transactions and records with the raw 64-bit TOD clock.
The clock counts from 1900-01-01 00:00 UTC and bit 51 is one microsecond, so shifting right
by 12 bits gives microseconds since the epoch.  The TOD clock may or may not include leap
seconds depending on how the mainframe is set up, hence the configurable offset.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

TOD_EPOCH = datetime(1900, 1, 1, tzinfo=UTC)
#: Microseconds from the TOD epoch (1900) to the Unix epoch (1970).
TOD_UNIX_US = (datetime(1970, 1, 1, tzinfo=UTC) - TOD_EPOCH) // timedelta(microseconds=1)
_MAX_STCK = (1 << 64) - 1


def stck_to_unix_us(value: int, offset_us: int = 0) -> int:
    """A raw STCK as microseconds since 1970 (comparable with Spark timestamps), without a
    datetime on the way: the hot paths convert every landed transaction's times.
    ``offset_us``: what the TOD clock runs ahead of UTC (leap seconds, a local-time offset:
    ``pipeline.config.Replicator.tod_offset_us``)."""
    return (value >> 12) - TOD_UNIX_US - offset_us


def stck_to_datetime(value: int, *, leap_seconds: int = 0) -> datetime:
    """Convert a raw STCK value to an aware UTC datetime with microsecond precision.

    ``leap_seconds`` is subtracted: pass the number of leap seconds the TOD clock includes
    (0 when the clock is steered to UTC without them, the usual set-up).
    """
    if not 0 <= value <= _MAX_STCK:
        raise ValueError(f"STCK value out of range: {value}")
    return TOD_EPOCH + timedelta(microseconds=(value >> 12) - leap_seconds * 1_000_000)


def datetime_to_stck(dt: datetime, *, leap_seconds: int = 0) -> int:
    """Convert a datetime to a raw STCK value (the inverse of :func:`stck_to_datetime`).

    A naive datetime is taken as UTC.  Sub-microsecond bits are zero.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - TOD_EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    micros += leap_seconds * 1_000_000
    value = micros << 12
    if not 0 <= value <= _MAX_STCK:
        raise ValueError(f"datetime outside the STCK range: {dt.isoformat()}")
    return value
