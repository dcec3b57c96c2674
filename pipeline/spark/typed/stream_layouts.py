"""GFFT layout versions for the typed tables: read back, planned, applied.

Every GFFT the stream sent lands in the raw ``layouts`` table (one row per URBF seen, see
``pipeline.reassembly.gfft``). The typed stage reads the versions of each configured file with
``gfft: prefer|require`` from that table *and* from the batch itself, so a GFFT decodes the
images of the same batch and the versions survive restarts (the table is small: one row per
GFFT sent). A version's layout is rebuilt from ``gfft_json`` with the conf's ``columns``.

``pipeline.typed.layouts`` decides which version decodes an image and which columns the tables
carry; here that meets Delta: new columns are added to the change, current and history tables
(``ALTER TABLE … ADD COLUMNS``) and columns a version reads wider are widened in place
(``ALTER COLUMN … TYPE`` under ``delta.enableTypeWidening``, ``pipeline.typed.widening``),
both compared with the schema first, so a replay changes nothing; each version first seen in
the batch is recorded in ``schema_events`` (st ``GFFT``, action ``layout_version`` with the
columns it added or widened, or ``layout_refused`` with the reason).
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
from pipeline.spark.land.tables import (
    conform_columns,
    schema_types,
    small_table,
    table_frame,
    table_path,
)
from pipeline.spark.typed import comments
from pipeline.typed.decoding import DecodeSpec, VersionedSpec
from pipeline.typed.layouts import (
    ColumnPlan,
    FileLayouts,
    column_types,
    plan_columns,
    version_label,
)
from pipeline.typed.widening import change_text, widen_steps

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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
                  files_present: bool, batch_layouts: bool = True) -> dict[str, FileVersions]:
    """Versions per table suffix of every ``gfft: prefer|require`` file: the ``layouts``
    table's rows plus the batch's own (read only when the batch has images of a configured
    file or GFFTs). ``batch_layouts`` False: the batch has no ``layouts`` rows (its counts
    say so), their read is skipped."""
    files = gfft_files(settings)
    if not files:
        return {}
    fresh = (table_frame(batch, "layouts", batch_id).where(file_filter(files)).select(
        *_COLUMNS).collect() if batch_layouts else [])
    if not fresh and not files_present:
        return {}
    stored = _stored(spark, settings, files, batch_id)
    # the batch's own rows come from the batch (the sink may or may not have landed them
    # yet); a key is new when no earlier batch landed it, which a replay computes alike
    rows = [(r, False) for r in stored] + [(r.asDict(), True) for r in fresh]
    return {lay.table_suffix(): _file_versions(lay, rows) for lay in files}


def stored_versions(spark: SparkSession, settings: Settings) -> dict[str, FileVersions]:
    """Versions per table suffix from the ``layouts`` table alone (at start: no batch)."""
    files = gfft_files(settings)
    rows = [(r, False) for r in _stored(spark, settings, files, None)] if files else []
    return {lay.table_suffix(): _file_versions(lay, rows) for lay in files}


def file_filter(layouts: list[Layout]) -> Column:
    """Rows (with subscription, dbid, fnr) of the given layouts' files. One SQL expression,
    parsed once: built from Column objects it cost three py4j calls per term (2 s per batch
    for 50 files)."""
    from pyspark.sql import functions as F

    terms = [f"(subscription = '{lay.subscription}' AND dbid = {int(lay.dbid)} "
             f"AND fnr = {int(lay.fnr)})" for lay in layouts]
    return F.expr(" OR ".join(terms) or "false")


def _stored(spark: SparkSession, settings: Settings, files: list[Layout],
            before: int | None) -> list[dict[str, Any]]:
    """The ``layouts`` table's rows of ``files`` landed before batch ``before`` (None: all):
    a small table, read without a Spark job where it can (``small_table``)."""
    wanted = {(lay.subscription, lay.dbid, lay.fnr) for lay in files}
    rows = small_table(spark, settings, "layouts", [*_COLUMNS, "batch_id"]).to_pylist()
    return [{c: r[c] for c in _COLUMNS} for r in rows
            if (r["subscription"], r["dbid"], r["fnr"]) in wanted
            and (before is None or (r["batch_id"] is not None and r["batch_id"] < before))]


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
    return {c: t for c, t in schema_types(spark, path).items() if c not in _NOT_VALUES}


def prepare_file(spark: SparkSession, settings: Settings, lay: Layout, fv: FileVersions,
                 tables: list[str], form: dict[str, Any]) -> tuple[VersionedSpec,
                                                                   list[dict[str, Any]]]:
    """The file's decode spec, after adding the columns new versions bring to ``tables``
    (change, current, history) and widening the ones they read wider; and the
    ``schema_events`` rows of the batch's new versions."""
    have = value_columns(spark, table_path(settings, tables[1]))
    plan = plan_columns(fv.layouts, have, TYPED_KEY_COLUMNS)
    conform_tables(spark, settings, tables, {c: plan.columns[c]
                                             for c in (*plan.added, *plan.widened)})
    if plan.added or plan.widened or fv.new:  # the columns say which field they hold
        comments.layouts_changed(spark, settings, tables, [
            *filter(None, [fv.layouts.conf]),
            *(v for v in fv.layouts.versions if v.key not in plan.refused)])
    spec = VersionedSpec(fv.layouts, plan.columns, refused=plan.refused,
                         tod_offset_us=settings.replicator.tod_offset_us, **form)
    return spec, version_events(lay, fv, plan, tables[1], settings.replicator.tod_offset_us)


def conform_tables(spark: SparkSession, settings: Settings, tables: list[str],
                   wanted: dict[str, str]) -> list[str]:
    """``conform_columns`` on each of a file's value tables (change, current, history) with
    the current table last: it is the one the plans compare with, so a crash between the
    ALTERs leaves it behind and the next batch (or start) conforms every table again.
    What changed, as ``table.column …`` strings."""
    changed: list[str] = []
    if not wanted:
        return changed
    for table in sorted(tables, key=lambda t: t.startswith("current_")):
        plan = conform_columns(spark, table_path(settings, table), wanted)
        changed += [f"{table}.{c}" for c in plan.describe()]
    return changed


def version_events(lay: Layout, fv: FileVersions, plan: ColumnPlan, current: str,
                   tod_offset_us: int = 0) -> list[dict[str, Any]]:
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
        types = column_types(version)
        added = [c for c in types if c not in known]
        brought = change_text(added, [f"{c} {known[c]} -> {t}" for c, t in types.items()
                                      if c in known and widen_steps(known[c], t)])
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
            "result": refused or brought or "no new columns",
            "reason": f"GFFT {version_label(key)}",
            "at": stck_to_datetime(key.created, tod_offset_us),
            "received_at": fv.received.get(key),
            "seq": len(rows),
        })
    return rows


def current_layouts(spark: SparkSession, settings: Settings, batch: DataFrame | None = None,
                    batch_id: int = 0) -> dict[str, tuple[RecordLayout | None, str]]:
    """Per table suffix, the layout that decodes the file's next images and where it comes
    from: the newest GFFT version its tables take (``gfft``; with the batch's own versions
    when a ``batch`` is given, else the stored ones), else the format buffer (``conf``;
    None without one)."""
    versions = (read_versions(spark, settings, batch, batch_id, True) if batch is not None
                else stored_versions(spark, settings))
    out: dict[str, tuple[RecordLayout | None, str]] = {}
    for lay in settings.layouts:
        fv = versions.get(lay.table_suffix())
        if fv is None or not fv.layouts.versions:
            out[lay.table_suffix()] = (lay.conf_layout(), "conf")
            continue
        have = value_columns(spark, table_path(settings, f"current_{lay.table_suffix()}"))
        newest = fv.layouts.newest(plan_columns(fv.layouts, have, TYPED_KEY_COLUMNS).refused)
        out[lay.table_suffix()] = (newest, layout_source(newest))
    return out


def next_layout(spec: DecodeSpec | VersionedSpec) -> RecordLayout | None:
    """The layout a decode spec decodes the file's next images with."""
    if isinstance(spec, DecodeSpec):
        return spec.layout
    return spec.layouts.newest(spec.refused)


def layout_source(layout: RecordLayout | None) -> str:
    """The source ``current_layouts`` names for the layout a file with GFFT versions decodes
    with: ``conf`` without one or without a key, else ``gfft``."""
    return "conf" if layout is None or layout.key is None else "gfft"


class NextLayouts:
    """Per table suffix, the layout that decodes a file's next images and its source, worked
    out once per batch and shared by the typed steps: the typed step tells it from the decode
    specs it built (``known``); the lifecycle step asks (``of``), and only when the typed step
    did not read the batch's versions is it worked out again (``current_layouts``)."""

    def __init__(self) -> None:
        self._batch_id: int | None = None
        self._layouts: dict[str, tuple[RecordLayout | None, str]] = {}

    def known(self, batch_id: int, specs: Mapping[str, DecodeSpec | VersionedSpec]) -> None:
        self._batch_id = batch_id
        self._layouts = {}
        for suffix, spec in specs.items():  # the same answer as current_layouts'
            layout = next_layout(spec)
            versions = isinstance(spec, VersionedSpec) and bool(spec.layouts.versions)
            self._layouts[suffix] = (layout, layout_source(layout) if versions else "conf")

    def of(self, spark: SparkSession, settings: Settings, batch: DataFrame, batch_id: int
           ) -> dict[str, tuple[RecordLayout | None, str]]:
        if self._batch_id != batch_id:
            self._batch_id = batch_id
            self._layouts = current_layouts(spark, settings, batch, batch_id)
        return self._layouts
