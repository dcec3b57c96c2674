"""``urbpipe maintain``: compact, vacuum and checkpoint the job's tables, one after another.

The plan (tables, retention, target size) is made without Spark
(``pipeline.ops.maintain_plan``); this module runs it table by table with delta-spark
(``pipeline.spark.land.maintenance``), saying where it is on the way (a run over a big lake
takes long) and what each table looked like before and after. A table that cannot be
maintained now (a concurrent commit of the job won, or it does not exist yet) is skipped and
reported; the others go on. Tables Delta compacts itself (``stream.delta_auto_compact``) are
vacuumed and checkpointed only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.ops.maintain_plan import AUTO_COMPACTED, MISSING, Plan, TableRun
from pipeline.spark.land import maintenance
from pipeline.spark.land.tables import table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]


def run_plan(spark: SparkSession, settings: Settings, plan: Plan, say: Say) -> list[TableRun]:
    """Maintain every table of ``plan`` in order; one :class:`TableRun` per table."""
    runs = []
    count = len(plan.tables)
    for index, table in enumerate(plan.tables, start=1):
        say(f"[{index}/{count}] {table}: …")
        run = maintain_table(spark, settings, table, plan)
        runs.append(run)
        say(f"[{index}/{count}] {run.line()}")
    return runs


def maintain_table(spark: SparkSession, settings: Settings, table: str, plan: Plan) -> TableRun:
    """Compact, vacuum and checkpoint one table; a conflict with a concurrent commit skips
    the rest of it (the next run tries again), any other error is reported the same way."""
    path = table_path(settings, table)
    if not maintenance.is_table(spark, path):
        return TableRun(table, 0, 0, problem=MISSING)
    started = time.monotonic()
    files, size = maintenance.table_files(spark, settings, path)
    # A table the job's writes compact (auto compaction) is not compacted here too: were the
    # job's compaction to lose that race, its batch would fail (maintenance.auto_compacted).
    auto = maintenance.auto_compacted(spark, path)
    try:
        if not auto:
            maintenance.compact(spark, path, plan.target_file_bytes)
        maintenance.vacuum(spark, path, plan.retention_hours)
        maintenance.checkpoint(spark, path)
    except Exception as exc:  # one table's failure must not stop the others
        reason = "a concurrent commit won, next run" if maintenance.is_conflict(exc) else (
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return TableRun(table, files, size, seconds=time.monotonic() - started,
                        problem=reason)
    after_files, after_size = maintenance.table_files(spark, settings, path)
    return TableRun(table, files, size, after_files, after_size,
                    seconds=time.monotonic() - started, note=AUTO_COMPACTED if auto else None)
