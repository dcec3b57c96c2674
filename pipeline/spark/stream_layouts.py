"""GFFT layout versions for the typed tables: read back, planned, applied (issue 6.1).

Every GFFT the stream sent lands in the raw ``layouts`` table (one row per URBF seen, see
``pipeline.reassembly.gfft``). The typed stage reads the versions of each configured file with
``gfft: prefer|require`` from that table *and* from the batch itself, so a GFFT decodes the
images of the same batch and the versions survive restarts (the table is small: one row per
GFFT sent). A version's layout is rebuilt from ``gfft_json`` with the conf's ``columns``.

``pipeline.typed.layouts`` decides which version decodes an image and which columns the tables
carry; here that meets Delta: new columns are added to the change, current and history tables
(``ALTER TABLE … ADD COLUMNS``, compared with the schema first, so a replay adds nothing), and
each version first seen in the batch is recorded in ``schema_events`` (st ``GFFT``, action
``layout_version`` with the columns it added, or ``layout_refused`` with the reason).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline.config import TYPED_KEY_COLUMNS, Layout, Settings
from pipeline.payload import LayoutError, LayoutKey, RecordLayout, layout_from_gfft
from pipeline.payload.gfft import gfft_view
from pipeline.reassembly.tables import stck_to_datetime
from pipeline.spark.sinks import table_frame
from pipeline.spark.tables import add_missing_columns, table_path
from pipeline.typed.decoding import VersionedSpec
from pipeline.typed.layouts import (
    ColumnPlan,
    FileLayouts,
    column_types,
    plan_columns,
    version_label,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_COLUMNS = ("subscription", "dbid", "fnr", "gfid", "created_stck", "gfft_json", "received_at")
#: Columns of the current table that are not layout values.
_NOT_VALUES = frozenset({"isn", "deleted", "verified", "subscription", "destination", "epoch",
                         "tsnr", "rsnr", "commit_time", "record_type", "origin", "batch_id"})


@dataclass(frozen=True)
class FileVersions:
    """One configured file's layouts, and the version keys first seen in this batch."""

    layouts: FileLayouts
    new: frozenset[LayoutKey]
    received: Mapping[LayoutKey, datetime | None]


def gfft_files(settings: Settings) -> list[Layout]:
    return [lay for lay in settings.layouts if lay.gfft != "ignore"]


def read_versions(spark: SparkSession, settings: Settings, batch: DataFrame, batch_id: int,
                  files_present: bool) -> dict[str, FileVersions]:
    """Versions per table suffix of every ``gfft: prefer|require`` file: the ``layouts``
    table's rows plus the batch's own (read only when the batch has images of a configured
    file or GFFTs)."""
    from pyspark.sql import functions as F

    files = gfft_files(settings)
    if not files:
        return {}
    mine = F.lit(False)
    for lay in files:
        mine = mine | ((F.col("subscription") == lay.subscription)
                       & (F.col("dbid") == lay.dbid) & (F.col("fnr") == lay.fnr))
    fresh = table_frame(batch, "layouts", batch_id).where(mine).select(*_COLUMNS).collect()
    if not fresh and not files_present:
        return {}
    stored = (spark.read.format("delta").load(table_path(settings, "layouts"))
              .where(mine & (F.col("batch_id") < batch_id)).select(*_COLUMNS).collect())
    # the batch's own rows come from the batch (the sink may or may not have landed them
    # yet); a key is new when no earlier batch landed it, which a replay computes alike
    rows = [(r.asDict(), False) for r in stored] + [(r.asDict(), True) for r in fresh]
    return {lay.table_suffix(): _file_versions(lay, rows) for lay in files}


def _file_versions(lay: Layout, rows: list[tuple[dict[str, Any], bool]]) -> FileVersions:
    versions: dict[LayoutKey, RecordLayout] = {}
    new: set[LayoutKey] = set()
    received: dict[LayoutKey, datetime | None] = {}
    for row, is_new in rows:
        if (row["subscription"], row["dbid"], row["fnr"]) != (lay.subscription, lay.dbid,
                                                               lay.fnr):
            continue
        try:
            layout = layout_from_gfft(gfft_view(json.loads(row["gfft_json"])), lay.columns)
        except (LayoutError, TypeError, ValueError):  # landed rows built once: not expected
            continue
        key = layout.key
        assert key is not None
        if key not in versions and is_new:
            new.add(key)
        versions.setdefault(key, layout)
        received.setdefault(key, row.get("received_at"))
    conf = lay.conf_layout() if lay.gfft == "prefer" else None
    return FileVersions(FileLayouts(conf, tuple(versions.values())), frozenset(new), received)


def value_columns(spark: SparkSession, path: str) -> dict[str, str]:
    """The layout value columns a current table has, with their types."""
    schema = spark.read.format("delta").load(path).schema
    return {f.name: f.dataType.simpleString() for f in schema.fields
            if f.name not in _NOT_VALUES}


def prepare_file(spark: SparkSession, settings: Settings, lay: Layout, fv: FileVersions,
                 tables: list[str], form: dict[str, Any]) -> tuple[VersionedSpec,
                                                                   list[dict[str, Any]]]:
    """The file's decode spec, after adding the columns new versions bring to ``tables``
    (change, current, history); and the ``schema_events`` rows of the batch's new versions."""
    from pyspark.sql.types import StructType

    have = value_columns(spark, table_path(settings, tables[1]))
    plan = plan_columns(fv.layouts, have, TYPED_KEY_COLUMNS)
    if plan.added:
        schema = StructType.fromDDL(ColumnPlan(plan.added).ddl())
        for table in tables:
            add_missing_columns(spark, table_path(settings, table), schema)
    spec = VersionedSpec(fv.layouts, plan.columns, refused=plan.refused, **form)
    return spec, version_events(lay, fv, plan, tables[1])


def version_events(lay: Layout, fv: FileVersions, plan: ColumnPlan,
                   current: str) -> list[dict[str, Any]]:
    """One ``schema_events`` row per version first seen in this batch: the columns it brought
    (compared with the conf and the older versions, so a replay writes the same row)."""
    rows = []
    for i, version in enumerate(fv.layouts.versions):
        key = version.key
        assert key is not None
        if key not in fv.new:
            continue
        older = FileLayouts(fv.layouts.conf, fv.layouts.versions[:i])
        known = plan_columns(older, None).columns
        added = [c for c in column_types(version) if c not in known]
        refused = plan.refused.get(key)
        rows.append({
            "event_id": f"GFFT|{lay.subscription}|{key.dbid}|{key.fnr}|{key.gfid}|"
                        f"{key.created}",
            "subscription": lay.subscription, "destination": None, "st": "GFFT",
            "dbid": key.dbid, "fnr": key.fnr, "utility_type": None, "utility": None,
            "detail_json": json.dumps({"gfid": key.gfid, "created_stck": key.created,
                                       "layout": version.to_dict()}, sort_keys=True),
            "action": "layout_refused" if refused else "layout_version",
            "target_table": current,
            "result": refused or (f"columns added: {', '.join(added)}" if added
                                  else "no new columns"),
            "reason": f"GFFT {version_label(key)}",
            "at": stck_to_datetime(key.created), "received_at": fv.received.get(key),
            "seq": len(rows),
        })
    return rows
