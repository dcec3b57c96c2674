"""What ``urbpipe maintain`` does, decided without Spark: which tables, the vacuum retention,
and how its plan and its summary read.

The retention rule is the one that keeps VACUUM from deleting a file somebody still needs.
VACUUM deletes files that no version of the table within the retention references and that
are older than the retention. Three things need files beyond the newest version:

* Delta's own floor (7 days, ``delta.deletedFileRetentionDuration``): readers and time travel
  on recent versions, and Delta's retention check, which refuses less;
* the table's property (``stream.delta_deleted_file_retention_days``), which may be longer;
* the direct writer (``pipeline.spark.land.datafiles``): a state task writes a file during a
  batch and the driver commits it at the batch's end, so until then the file is in no log
  and looks exactly like garbage. ``maintenance.commit_wait_hours`` bounds that wait.

The retention is the longest of them and of ``maintenance.vacuum_retention_hours``: no conf
can make it shorter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config import Settings
from pipeline.spark.land.tables import DIRECT_TABLES
from pipeline.spark.typed.tables import select_tables

#: Delta's default ``delta.deletedFileRetentionDuration`` (7 days) in hours.
DELTA_MIN_RETENTION_HOURS = 168
#: The problem of a table the job has not created yet: nothing to maintain, not a failure.
MISSING = "no such table yet"
#: The note of a table Delta compacts itself (``stream.delta_auto_compact``).
AUTO_COMPACTED = "compaction left to Delta's auto compaction"


def vacuum_retention_hours(settings: Settings) -> int:
    """The retention VACUUM runs with: never shorter than Delta's 7 days, the tables'
    ``deletedFileRetentionDuration`` or the longest wait of a direct-writer file."""
    return max(DELTA_MIN_RETENTION_HOURS,
               settings.maintenance.vacuum_retention_hours,
               settings.stream.delta_deleted_file_retention_days * 24,
               math.ceil(settings.maintenance.commit_wait_hours))


@dataclass(frozen=True)
class Plan:
    """One maintenance run: the tables in order and what is done to each."""

    tables: tuple[str, ...]
    retention_hours: int
    target_file_bytes: int
    #: the tables whose conf gives them Delta's auto compaction (the run reads the table's
    #: own property, which a restart of the job brings in line with the conf)
    auto_compacted: frozenset[str] = frozenset()

    def describe(self) -> list[str]:
        """The dry run's lines: what would be done, table by table."""
        size = human_bytes(self.target_file_bytes)
        compact = f"compact files smaller than {size} into files of about {size}"
        return [f"{name}: {AUTO_COMPACTED if name in self.auto_compacted else compact}; "
                f"vacuum unreferenced files older than {self.retention_hours} h; "
                "checkpoint the log" for name in self.tables]


def plan(settings: Settings, wanted: Sequence[str] | None = None) -> Plan:
    tables = tuple(select_tables(settings, wanted))
    auto = frozenset(t for t in tables if settings.stream.delta_auto_compact
                     and t not in DIRECT_TABLES)
    return Plan(tables, vacuum_retention_hours(settings), settings.maintenance.target_file_bytes,
                auto)


@dataclass(frozen=True)
class TableRun:
    """What maintenance did to one table (``files_after``/``bytes_after`` None: not done)."""

    table: str
    files_before: int
    bytes_before: int
    files_after: int | None = None
    bytes_after: int | None = None
    seconds: float = 0.0
    #: why the table was skipped or failed: a concurrent commit (tried again next run), a
    #: missing table, an error
    problem: str | None = None
    #: what was done differently, for the operator (compaction left to Delta's own)
    note: str | None = None

    @property
    def failed(self) -> bool:
        """Skipped for a reason an operator must know (a conflict, an error)."""
        return self.files_after is None and self.problem != MISSING

    def line(self) -> str:
        if self.files_after is None or self.bytes_after is None:
            return (f"{self.table}: {self.files_before} files, "
                    f"{human_bytes(self.bytes_before)}; skipped: {self.problem}")
        return (f"{self.table}: {self.files_before} → {self.files_after} files, "
                f"{human_bytes(self.bytes_before)} → {human_bytes(self.bytes_after)}, "
                f"{self.seconds:.1f} s" + (f"; {self.note}" if self.note else ""))


def summary(runs: Sequence[TableRun], seconds: float) -> list[str]:
    """The lines printed at the end of a run: one per table, then the totals."""
    done = [r for r in runs if r.files_after is not None]
    before = sum(r.files_before for r in done)
    after = sum(r.files_after or 0 for r in done)
    skipped = len(runs) - len(done)
    return [*(r.line() for r in runs),
            f"maintained {len(done)} of {len(runs)} tables in {seconds:.1f} s: "
            f"{before} → {after} files" + (f"; {skipped} skipped" if skipped else "")]


def human_bytes(value: int) -> str:
    """``12.3 MB``-style sizes for the operator (binary units, as the conf's)."""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
