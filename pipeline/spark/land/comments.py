"""Column comments on Delta tables: in the schema a table is created with, and kept current.

A comment lives in the column's metadata in the Delta log (``DESCRIBE TABLE`` shows it, by path
or by catalog name, in Spark and in any reader of the schema). A table created by this version
gets its comments with its schema (no extra commit); a table made before, or a column added by
``ALTER TABLE … ADD COLUMNS``, gets them by ``ALTER COLUMN … COMMENT`` (one commit per table),
once: the table keeps a digest of the comments it was given (table property
``urbpipe.comments``), so a start whose comments are unchanged reads nothing more than the
properties it reads anyway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: The table property holding the digest of the comments last applied.
MARKER = "urbpipe.comments"


def marker(comments: Mapping[str, str]) -> dict[str, str]:
    """The property that says these comments were applied."""
    text = json.dumps(sorted(comments.items()), ensure_ascii=False)
    return {MARKER: hashlib.sha1(text.encode()).hexdigest()[:16]}


def commented(schema: StructType, comments: Mapping[str, str]) -> StructType:
    """``schema`` with each top-level column's comment set (what a new table is made with)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([
        StructField(f.name, f.dataType, f.nullable,
                    {**f.metadata, "comment": comments[f.name]} if f.name in comments
                    else f.metadata)
        for f in schema.fields])


def sql_text(value: str) -> str:
    """A Spark SQL string literal (backslash escapes, Spark's default parser)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_comments(spark: SparkSession, path: str) -> dict[str, str]:
    """Every top-level column of the Delta table at ``path`` and its comment ("" if none)."""
    schema = spark.read.format("delta").load(path).schema
    return {f.name: str(f.metadata.get("comment", "")) for f in schema.fields}


def apply_comments(spark: SparkSession, path: str, wanted: Mapping[str, str],
                   replace: Callable[[str, str], bool] | None = None) -> list[str]:
    """Set the ``wanted`` comments the table's columns lack or hold otherwise (``replace``
    (column, its comment) may keep an existing one); columns the table does not have are left
    out. One ``ALTER TABLE … ALTER COLUMN a COMMENT …, b COMMENT …``: one commit for them all
    (a GFFT version names every value column of four tables). The columns changed."""
    changed = {}
    for column, have in column_comments(spark, path).items():
        text = wanted.get(column)
        if text is None or have == text or (have and replace and not replace(column, have)):
            continue
        changed[column] = text
    if changed:
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN " + ", ".join(
            f"`{column}` COMMENT {sql_text(text)}" for column, text in changed.items()))
    return list(changed)


def ensure_comments(spark: SparkSession, path: str, wanted: Mapping[str, str],
                    properties: Mapping[str, str],
                    replace: Callable[[str, str], bool] | None = None) -> None:
    """``apply_comments`` unless the table's ``properties`` (as read) say these comments were
    applied; the caller then sets :func:`marker` with its other properties."""
    if properties.get(MARKER) != marker(wanted)[MARKER]:
        apply_comments(spark, path, wanted, replace)
