"""Direct typed writer, driver side: every configured file's typed tables in one Spark job.

With the direct writer (``stream.raw_writer``) the state tasks write the batch's
transactions, records and images as Parquet files; the driver commits them to the raw tables
(``pipeline.spark.land.raw``). The typed step then reads those same files again, in Python
tasks: one Spark job of (at most) one task per core, each with its share of the configured
files (``FilePlan``s, round robin), each task reading the batch's rows once and landing its
files one after another through delta-rs (``pipeline.spark.typed.file_writer``). What stays
here: what is read once per batch for all files (the decode specs with their GFFT versions,
the refresh cutoffs: ``pipeline.spark.typed.stage``), the plans, and the ``quarantine`` rows
the tasks hand back (a raw table, appended by Spark as the Spark path does).

Why one job and not a job per file: a file's batch in Spark was ~20 Spark jobs and four Delta
commits (measured: ~7 s per file and batch whatever its size); here the cost of a file is its
delta-rs commits (tens of ms each) inside a task that is already running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.config import Layout, Settings
from pipeline.spark.land.tables import table_path
from pipeline.spark.land.writes import append_once
from pipeline.spark.typed.file_writer import FilePlan, FileResult, TypedWork, land_work
from pipeline.spark.typed.tables import (
    changes_table,
    current_table,
    history_table,
    tombstones_table,
)
from pipeline.typed.decoding import DecodeSpec, VersionedSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The raw tables a typed batch is made of.
RAW_INPUTS = ("transactions", "records", "images")
_DAY_US = 86_400_000_000


def raw_inputs(settings: Settings, files: Sequence[Mapping[str, Any]]
               ) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The batch's data files of each raw input table: (full path, the subscriptions whose
    rows it holds; none known: every one), in the order given."""
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {t: [] for t in RAW_INPUTS}
    for file in files:
        if file["table"] in out:
            path = f"{table_path(settings, file['table']).rstrip('/')}/{file['path']}"
            out[file["table"]].append((path, tuple(file.get("subscriptions") or ())))
    return out


def _share(inputs: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]],
           plans: Sequence[FilePlan]) -> dict[str, tuple[str, ...]]:
    """The files a task with ``plans`` reads: those that may hold its subscriptions' rows."""
    mine = {plan.key[0] for plan in plans}
    return {table: tuple(path for path, subs in files if not subs or mine.intersection(subs))
            for table, files in inputs.items()}


def _tasks(plans: Sequence[FilePlan], tasks: int) -> list[list[FilePlan]]:
    """Plans in ``tasks`` shares, a subscription's files together where the counts allow
    (each task reads only its subscriptions' rows): largest subscriptions first, each to the
    share with the fewest files, split only when it holds more than a share's worth."""
    by_sub: dict[str, list[FilePlan]] = {}
    for plan in plans:
        by_sub.setdefault(plan.key[0], []).append(plan)
    shares: list[list[FilePlan]] = [[] for _ in range(tasks)]
    fair = -(-len(plans) // tasks)
    for group in sorted(by_sub.values(), key=len, reverse=True):
        while group:
            target = min(shares, key=len)
            room = max(1, fair - len(target))
            target.extend(group[:room])
            group = group[room:]
    return [share for share in shares if share]


def file_plan(settings: Settings, lay: Layout, spec: DecodeSpec | VersionedSpec,
              cutoffs_us: tuple[int, ...]) -> FilePlan:
    """What a task needs for one layout's file: its tables (by kind), spec, rules."""
    kinds = {"changes": changes_table(lay), "current": current_table(lay)}
    if lay.deletes == "remove":
        kinds["tombstones"] = tombstones_table(lay)
    if lay.history:
        kinds["history"] = history_table(lay)
    retention = (None if lay.tombstone_retention_days is None
                 else int(lay.tombstone_retention_days * _DAY_US))
    return FilePlan(key=(lay.subscription, lay.dbid, lay.fnr),
                    label=f"{lay.subscription}/{lay.dbid}/{lay.fnr}",
                    tables={k: (name, table_path(settings, name)) for k, name in kinds.items()},
                    spec=spec, deletes=lay.deletes, retention_us=retention,
                    cutoffs_us=tuple(cutoffs_us), repair=settings.reconcile.repair)


def land_files(spark: SparkSession, settings: Settings,
               specs: Mapping[str, DecodeSpec | VersionedSpec],
               cutoffs: Mapping[tuple[int, int], tuple[int, ...]],
               inputs: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]], batch_id: int,
               app_id: str) -> list[FileResult]:
    """Land every configured file the batch has records of; one result per such file."""
    plans = [file_plan(settings, lay, specs[lay.table_suffix()],
                       tuple(cutoffs.get((lay.dbid, lay.fnr), ())))
             for lay in settings.layouts]
    context = spark.sparkContext
    tasks = max(1, min(len(plans), context.defaultParallelism))
    works = [TypedWork(tuple(share), _share(inputs, share), batch_id, app_id)
             for share in _tasks(plans, tasks)]
    context.setJobDescription(f"typed tables of batch {batch_id} ({len(plans)} files)")
    try:
        return context.parallelize(works, len(works)).flatMap(land_work).collect()
    finally:
        context.setJobDescription(None)


def append_quarantine(spark: SparkSession, settings: Settings, rows: list[dict[str, Any]],
                      changes: str, app_id: str, batch_id: int) -> None:
    """The undecodable images of one file into ``quarantine``, once (the Spark path's app
    id: ``<app>-quarantine-<changes table>``)."""
    from pyspark.sql.types import StructType

    from pipeline.spark.land.tables import SCHEMAS

    if not rows:
        return
    schema = StructType.fromDDL(f"{SCHEMAS['quarantine']}, batch_id bigint")
    data = [tuple(r[f.name] for f in schema.fields) for r in rows]
    append_once(spark.createDataFrame(data, schema), table_path(settings, "quarantine"),
                f"{app_id}-quarantine-{changes}", batch_id)
