"""The typed tables of one configured file: their names, their DDL, the decode spec of the
format buffer, and a record of which exist (``TypedTableSet``); and every table the job writes
for a conf (``job_tables``: its own and the typed ones), which maintenance works through.

``changes_<sub>_<fnr>`` (every decoded image), ``current_<sub>_<fnr>`` (one row per ISN),
``tombstones_<sub>_<fnr>`` (with ``deletes: remove``) and ``history_<sub>_<fnr>`` (with
``history: true``); ``pipeline.spark.typed.stage`` says how a batch lands in them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline.config import Layout, Settings
from pipeline.errors import UsageError
from pipeline.objectstore import is_object_store
from pipeline.payload import spark_ddl
from pipeline.spark.land.datafiles import writer_mode
from pipeline.spark.land.log_peek import look
from pipeline.spark.land.tables import (
    CHANGE_FEED,
    SCHEMAS,
    SENT_TABLE,
    create_if_missing,
    for_each_table,
    lifetime_properties,
    set_properties,
    table_path,
)
from pipeline.spark.typed import comments
from pipeline.typed.decoding import DecodeSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHANGE_KEYS_DDL = (
    "subscription string, destination string, epoch int, tsnr bigint, rsnr bigint, "
    "dsnr bigint, isn bigint, record_type string, image_type string, commit_time timestamp, "
    "origin string")
CURRENT_META_DDL = (
    "deleted boolean, verified boolean, subscription string, destination string, epoch int, "
    "tsnr bigint, rsnr bigint, commit_time timestamp, record_type string, origin string")
TOMBSTONE_DDL = (
    "isn bigint, subscription string, destination string, epoch int, tsnr bigint, rsnr bigint, "
    "commit_time timestamp, record_type string, origin string, batch_id bigint")
INTERVAL_DDL = "valid_from timestamp, valid_to timestamp, is_current boolean"
VERSION = ("commit_time", "epoch", "tsnr", "rsnr")
#: Version, then the tie-breaks of ``pipeline.typed.versioning.order_key``.
ORDER = (*VERSION, "destination", "verified")
META = ("subscription", "destination", "epoch", "tsnr", "rsnr", "commit_time", "record_type",
        "origin")


def decode_spec(settings: Settings, lay: Layout) -> DecodeSpec:
    """The conf layout's spec (``gfft: ignore``, or no GFFT for the file yet)."""
    layout = lay.conf_layout()
    assert layout is not None, "decode_spec needs a format buffer"
    return DecodeSpec(layout, **form(settings, lay))


def form(settings: Settings, lay: Layout) -> dict[str, Any]:
    sub = next(s for s in settings.subscriptions if s.name == lay.subscription)
    return {"ebcdic": sub.ebcdic, "codepage": lay.codepage or settings.replicator.codepage,
            "empty": lay.empty}


def changes_table(lay: Layout) -> str:
    return f"changes_{lay.table_suffix()}"


def current_table(lay: Layout) -> str:
    return f"current_{lay.table_suffix()}"


def tombstones_table(lay: Layout) -> str:
    return f"tombstones_{lay.table_suffix()}"


def history_table(lay: Layout) -> str:
    return f"history_{lay.table_suffix()}"


def _values(lay: Layout, values: str | None) -> list[str]:
    """The value columns' DDL as a list part: given, else the conf layout's, else none (a
    GFFT-only file starts with its key columns; the first GFFT adds the values)."""
    conf = lay.conf_layout()
    ddl = values if values is not None else (spark_ddl(conf) if conf is not None else "")
    return [ddl] if ddl else []


def change_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join([CHANGE_KEYS_DDL, *_values(lay, values), "batch_id bigint"])


def current_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join(["isn bigint", *_values(lay, values), CURRENT_META_DDL, "batch_id bigint"])


def history_ddl(lay: Layout, values: str | None = None) -> str:
    return ", ".join(["isn bigint", *_values(lay, values), INTERVAL_DDL, CURRENT_META_DDL,
                      "batch_id bigint"])


def table_kinds(lay: Layout) -> dict[str, str]:
    """Each of a layout's table names → its kind (changes, current, tombstones, history)."""
    return {changes_table(lay): "changes", current_table(lay): "current",
            tombstones_table(lay): "tombstones", history_table(lay): "history"}


def typed_tables(lay: Layout) -> list[tuple[str, str]]:
    """(name, DDL) of every table a layout writes."""
    tables = [(changes_table(lay), change_ddl(lay)), (current_table(lay), current_ddl(lay))]
    if lay.deletes == "remove":
        tables.append((tombstones_table(lay), TOMBSTONE_DDL))
    if lay.history:
        tables.append((history_table(lay), history_ddl(lay)))
    return tables


def direct_typed(settings: Settings) -> bool:
    """Whether the direct typed writer lands the typed tables (Python tasks, delta-rs;
    ``pipeline.spark.typed.direct``): with the direct writer on a lake of the local (or a
    shared) file system. An object store keeps Spark's way: delta-rs needs a commit lock
    there that this project has not set up or tested."""
    lake = settings.location(settings.stream.lake_dir)
    return writer_mode(settings) == "direct" and not is_object_store(lake)


def typed_properties(settings: Settings, name: str) -> dict[str, str]:
    """Delta properties of a typed table: the lifetime ones (auto compaction only where Spark
    writes the typed tables: the direct writer's delta-rs commits run no Spark hook, so
    ``urbpipe maintain`` compacts them), the checkpoint interval of the job's tables
    (``stream.delta_checkpoint_interval``: every file's four tables commit every batch), and
    on ``current_…`` the change feed (``stream.change_feed``), so downstream jobs read what
    the MERGEs, deletes and refreshes changed instead of diffing snapshots. Delta's defaults
    otherwise (statistics)."""
    props = lifetime_properties(settings, spark_written=not direct_typed(settings))
    props["delta.checkpointInterval"] = str(settings.stream.delta_checkpoint_interval)
    if name.startswith("current_"):
        props[CHANGE_FEED] = str(settings.stream.change_feed).lower()
    return props


def job_tables(settings: Settings) -> list[str]:
    """Every table the job writes for this conf: its own (what it sent to Kafka last), then
    each layout's typed tables."""
    names = [*SCHEMAS, SENT_TABLE]
    for lay in settings.layouts:
        names.extend(name for name, _ in typed_tables(lay) if name not in names)
    return names


def select_tables(settings: Settings, wanted: Sequence[str] | None = None) -> list[str]:
    """The tables to maintain: ``wanted`` (``--tables``), else ``maintenance.tables``; names
    the job does not write are a usage error (a typo must not silently maintain nothing)."""
    known = job_tables(settings)
    chosen = list(wanted) if wanted else settings.maintenance.tables
    if chosen == "all" or chosen == ["all"]:
        return known
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise UsageError(f"not a table the job writes: {', '.join(unknown)} "
                         f"(known: {', '.join(known)})")
    return [name for name in known if name in chosen]  # the job's order, once each


def value_tables(lay: Layout) -> list[str]:
    """The tables with the layout's value columns: change, current, history (tombstones keep
    versions only)."""
    return [name for name, _ in typed_tables(lay) if not name.startswith("tombstones_")]


class TypedTableSet:
    """Creates each layout's tables (empty) once per writer, so analysts can query early; a
    new set (a restart, a new conf) checks them all again (create-if-not-exists)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._created: set[str] = set()

    def ensure(self, spark: SparkSession) -> None:
        from pyspark.sql.types import StructType

        settings = self._settings
        wanted = {name: (lay, ddl) for lay in settings.layouts for name, ddl in typed_tables(lay)
                  if table_path(settings, name) not in self._created}

        def ensure(name: str) -> None:
            lay, ddl = wanted[name]
            kind = table_kinds(lay)[name]
            schema, noted = comments.created(lay, kind, StructType.fromDDL(ddl))
            props = {**typed_properties(settings, name), **noted}
            path = table_path(settings, name)
            seen = look(spark, settings, path)
            if seen is None:
                create_if_missing(spark, settings, name, schema, props)
                return
            # a table made by an older version or conf: comments and properties current
            comments.ensure_table(spark, lay, kind, path, schema, seen.properties)
            set_properties(spark, path, props, seen.properties)

        for_each_table(wanted, ensure)
        self._created.update(table_path(settings, name) for name in wanted)
