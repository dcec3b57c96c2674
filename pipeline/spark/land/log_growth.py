"""How big each table's ``_delta_log`` gets at steady state, and what that costs each commit.

The job commits to each bulk table (transactions, records, images …) once per batch, and Delta
keeps every commit's JSON and CRC in ``_delta_log`` for ``delta.logRetentionDuration``
(``stream.delta_log_retention_days``); its log clean-up deletes only what is older. So at
steady state a bulk table's log holds about ``retention / trigger interval`` commits: 518,400
at the defaults (30 days, 5 seconds).

Delta finds a table's newest version by listing that folder, at every commit. Measured here
(``benchmarks/delta_log_growth.py``, BENCHMARKS.md "Delta log growth"): on the local file
system an append's time grows by about 20 ms per 1,000 files in the folder — one listing of
the whole folder per commit — with four files per commit (the JSON, the CRC and Hadoop's
checksum of each). HDFS and object stores list too (S3 in pages of 1,000 keys); their cost per
file was not measured here, so the estimate below is the local file system's.

The job does not change the retention on its own (analysts' time travel and the change feed's
readers depend on it): it says at start what the conf will cost, when that is more than
``WARN_ADDED_MS`` per commit, and how to lower it. Engine-free.
"""

from __future__ import annotations

from pipeline.config import Settings, interval_ms

#: Measured on the local file system (benchmarks/delta_log_growth.py): ms per commit per 1,000
#: files in ``_delta_log``, and files each commit leaves there.
MS_PER_1000_FILES = 20.0
FILES_PER_COMMIT = 4
#: Warn when the steady-state log adds more than this to every commit of a table.
WARN_ADDED_MS = 500.0

_DAY_MS = 86_400_000


def retained_commits(retention_days: float, trigger_ms: float) -> int:
    """Commits a table written at every trigger keeps in its log at steady state."""
    return int(retention_days * _DAY_MS / max(trigger_ms, 1.0))


def added_commit_ms(commits: int) -> float:
    """What a log of ``commits`` adds to each commit (the local file system's measurement)."""
    return commits * FILES_PER_COMMIT / 1000 * MS_PER_1000_FILES


def advice(settings: Settings, trigger_interval: str | None = None) -> str | None:
    """A warning for the job's start when the steady-state log slows every commit by more
    than ``WARN_ADDED_MS``; None otherwise. ``trigger_interval``: the one the job runs with
    (``--trigger``), else conf's."""
    stream = settings.stream
    trigger = trigger_interval or stream.trigger_interval
    commits = retained_commits(stream.delta_log_retention_days, interval_ms(trigger))
    added = added_commit_ms(commits)
    if added <= WARN_ADDED_MS:
        return None
    return (f"each bulk table's _delta_log will hold ~{commits:,} commits "
            f"(stream.delta_log_retention_days {stream.delta_log_retention_days:g} at a "
            f"{trigger} trigger): Delta lists that folder at every commit, which adds "
            f"~{added / 1000:,.1f} s to each commit of each table once the log is full "
            f"(measured on a local file system: {MS_PER_1000_FILES:g} ms per 1,000 files, "
            f"BENCHMARKS.md 'Delta log growth'). Lower stream.delta_log_retention_days or "
            f"raise stream.trigger_interval for a job that runs for weeks.")
