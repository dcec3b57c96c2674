"""Column comments on the typed tables, at the points where their columns come to be.

* a table created (``TypedTableSet.ensure``): the key and version columns, and the value
  columns of the conf's format buffer, with the schema; a table made before comments existed
  gets them then, once (``pipeline.spark.land.comments``);
* a format buffer that added or widened columns at start (``reconcile``): the conf's text;
* a GFFT version that added or widened columns, or first seen (the typed stage): each value
  column described by the newest layout that names it, with the GFFT's long name.

A comment written from a GFFT version is never replaced by the conf's text: the stream's
layout is the newer word on the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.config import Layout, Settings
from pipeline.payload import RecordLayout
from pipeline.spark.land.comments import apply_comments, commented, ensure_comments, marker
from pipeline.spark.land.tables import table_path
from pipeline.spark.typed.dictionary import typed_comments, value_comments

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

_FROM_GFFT = "Layout: GFFT "


def conf_comments(lay: Layout, kind: str, columns: list[str]) -> dict[str, str]:
    """The comments a ``kind`` table (changes, current, tombstones, history) gets from conf
    alone: key/version columns and the format buffer's value columns."""
    conf = lay.conf_layout()
    values = value_comments([conf]) if conf is not None else {}
    return typed_comments(kind, columns, values)


def keep_from_gfft(column: str, have: str) -> bool:
    """May the conf's text replace this comment? Not one a GFFT version wrote."""
    return _FROM_GFFT not in have


def created(lay: Layout, kind: str, schema: StructType) -> tuple[StructType, dict[str, str]]:
    """A new table's schema with its comments, and the properties saying they were applied."""
    notes = conf_comments(lay, kind, schema.fieldNames())
    return commented(schema, notes), marker(notes)


def ensure_table(spark: SparkSession, lay: Layout, kind: str, path: str,
                 schema: StructType, properties: Mapping[str, str]) -> None:
    """An existing table (made before comments existed, or before this conf's columns) gets
    the conf's comments, unless its properties say it has them."""
    ensure_comments(spark, path, conf_comments(lay, kind, schema.fieldNames()), properties,
                    replace=keep_from_gfft)


def conf_columns_changed(spark: SparkSession, settings: Settings, lay: Layout,
                         table: str) -> None:
    """After a start added or widened value columns from the format buffer."""
    path = table_path(settings, table)
    conf = lay.conf_layout()
    if conf is not None:
        apply_comments(spark, path, value_comments([conf]), replace=keep_from_gfft)


def layouts_changed(spark: SparkSession, settings: Settings, tables: list[str],
                    layouts: list[RecordLayout]) -> None:
    """After a batch's GFFT versions (``layouts``: the conf's, then the versions, oldest
    first) added or widened columns of ``tables``, or were first seen."""
    wanted = value_comments(layouts)
    for table in tables:
        apply_comments(spark, table_path(settings, table), wanted)
