"""How big each table's ``_delta_log`` gets at steady state, and what that costs each commit.

The job commits to each bulk table (transactions, records, images …) once per batch, and Delta
keeps every commit's JSON and CRC in ``_delta_log`` for ``delta.logRetentionDuration``
(``stream.delta_log_retention_days``); its log clean-up deletes only what is older. So at
steady state a bulk table's log holds about ``retention / trigger interval`` commits: 518,400
at the defaults (30 days, 5 seconds).

Delta finds a table's newest version by listing that folder, at every commit. Measured with
``benchmarks/delta_log_growth.py`` (decision 0012): on the local file
system an append's time grows by about 20 ms per 1,000 files in the folder — one listing of
the whole folder per commit — with four files per commit (the JSON, the CRC and Hadoop's
checksum of each). HDFS lists the whole folder too (its cost per file was not measured here,
so the estimate for it is the local file system's). On ``s3a://`` Delta's
``S3SingleDriverLogStore`` lists the whole folder at every commit as well, in LIST requests of
1,000 keys, two keys per commit (the JSON and Delta's CRC; S3A writes no Hadoop checksums):
the warning counts the requests. Delta's start-after listing (``delta.enableFastS3AListFrom``)
would bound it, but fails with the jars the product ships (``pipeline.config``, refused there).

The project's own log stores (``stream.delta_log_store: probing``, the default; jvm/logstore)
do not list the folder: on a local lake they probe the log's file names from the version Delta
asks for (decision 0017), on S3 they list from it with ListObjectsV2's ``StartAfter`` and
check a commit's one key before writing it (decision 0019). The log's size then costs a commit
nothing and the job does not warn; the figures above are for Delta's own stores (``hadoop``).

The job does not change the retention on its own (analysts' time travel and the change feed's
readers depend on it): it says at start what the conf will cost, when that is more than
``WARN_ADDED_MS`` per commit, and how to lower it. Engine-free.
"""

from __future__ import annotations

from pipeline.config import Settings, interval_ms
from pipeline.objectstore import is_object_store

#: Measured on the local file system (benchmarks/delta_log_growth.py): ms per commit per 1,000
#: files in ``_delta_log``, and files each commit leaves there.
MS_PER_1000_FILES = 20.0
FILES_PER_COMMIT = 4
#: Warn when the steady-state log adds more than this to every commit of a table.
WARN_ADDED_MS = 500.0
#: On S3: keys each commit leaves in ``_delta_log``, keys per LIST request, and the LIST
#: requests per commit above which the job warns.
S3_KEYS_PER_COMMIT = 2
S3_KEYS_PER_LIST = 1000
WARN_COMMIT_LISTS = 10

_DAY_MS = 86_400_000


def retained_commits(retention_days: float, trigger_ms: float) -> int:
    """Commits a table written at every trigger keeps in its log at steady state."""
    return int(retention_days * _DAY_MS / max(trigger_ms, 1.0))


def added_commit_ms(commits: int) -> float:
    """What a log of ``commits`` adds to each commit (the local file system's measurement)."""
    return commits * FILES_PER_COMMIT / 1000 * MS_PER_1000_FILES


def advice(settings: Settings, trigger_interval: str | None = None) -> str | None:
    """A warning for the job's start when the steady-state log slows every commit (by more
    than ``WARN_ADDED_MS``; on S3, by more than ``WARN_COMMIT_LISTS`` LIST requests); None
    otherwise. ``trigger_interval``: the one the job runs with (``--trigger``), else conf's."""
    stream = settings.stream
    trigger = trigger_interval or stream.trigger_interval
    commits = retained_commits(stream.delta_log_retention_days, interval_ms(trigger))
    held = (f"each bulk table's _delta_log will hold ~{commits:,} commits "
            f"(stream.delta_log_retention_days {stream.delta_log_retention_days:g} at a "
            f"{trigger} trigger): Delta lists that folder at every commit, which adds ")
    lower = (" Lower stream.delta_log_retention_days or raise stream.trigger_interval for a "
             "job that runs for weeks.")
    if stream.delta_log_store == "probing":
        return None  # listed from the version asked for: flat (decisions 0017 and 0019)
    if is_object_store(settings.location(stream.lake_dir)):
        lists = commit_lists(commits)
        if lists <= WARN_COMMIT_LISTS:
            return None
        return (f"{held}~{lists:,} S3 LIST requests of {S3_KEYS_PER_LIST:,} keys to each "
                f"commit of each table once the log is full." + lower)
    added = added_commit_ms(commits)
    if added <= WARN_ADDED_MS:
        return None
    return (f"{held}~{added / 1000:,.1f} s to each commit of each table once the log is full "
            f"(measured on a local file system: {MS_PER_1000_FILES:g} ms per 1,000 files, "
            f"docs/decisions/0012-delta-log-growth-warning.md)." + lower)


def commit_lists(commits: int) -> int:
    """S3 LIST requests of one listing of a log of ``commits`` commits."""
    return -(-commits * S3_KEYS_PER_COMMIT // S3_KEYS_PER_LIST)
