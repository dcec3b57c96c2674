"""The catalog's mechanics: the schema, a table by name at its lake path, a view.

Every table the job writes is registered as an *external* Delta table at its path
(``CREATE TABLE … USING DELTA LOCATION …``): the catalog holds the name and the location, the
table's Delta log stays the only word on its schema, comments and data, so an ``ALTER`` by the
job is seen by name at once and dropping the name never touches the data. Registering is
idempotent (a name already at its path is left alone) and follows the lake: a name the job
registered at another location (a moved ``stream.lake_dir``) is pointed at the new one. A name
in the schema that is not an external table of the job's (a managed table, a view where a
table belongs) is refused with one line: the job never drops what it did not make.

``pipeline.spark.typed.catalog`` says what is registered (every table the job writes, and the
views); ``pipeline.spark.engine.metastore`` which metastore the session talks to.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import ConfigError, Settings
from pipeline.spark.land.comments import sql_text
from pipeline.spark.land.tables import table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.catalog")
SCHEMA_COMMENT = ("urbpipe: the Adabas Event Replicator's transactions, records, images and "
                  "typed tables, landed from Kafka (DATA_DICTIONARY.md)")


class CatalogError(ConfigError):
    """A catalog name the job cannot use, in one line (the job exits 2 on it)."""


def qualified(settings: Settings, name: str) -> str:
    """``schema.name``, quoted for SQL."""
    return f"`{settings.catalog.schema_name}`.`{name}`"


def ensure_schema(spark: SparkSession, settings: Settings) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{settings.catalog.schema_name}` "
              f"COMMENT {sql_text(SCHEMA_COMMENT)}")


def _same_place(location: str, path: str) -> bool:
    """Does a catalog location (``file:/x`` for a local path) name the lake path ``path``?"""
    def norm(value: str) -> str:
        value = value.rstrip("/")
        if value.startswith("file:"):
            value = "/" + value[len("file:"):].lstrip("/")
        return str(Path(value)) if value.startswith("/") else value
    return norm(location) == norm(path)


def describe(spark: SparkSession, settings: Settings, name: str) -> dict[str, str] | None:
    """The catalog's entry for ``name`` (``DESCRIBE TABLE EXTENDED``'s detail rows: Type,
    Location, Provider …), or None when the schema has no such name."""
    if not spark.catalog.tableExists(f"{settings.catalog.schema_name}.{name}"):
        return None
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {qualified(settings, name)}").collect()
    return {str(r["col_name"]).strip(): str(r["data_type"] or "").strip() for r in rows}


def register(spark: SparkSession, settings: Settings, name: str) -> str:
    """Name the Delta table at ``name``'s lake path in the catalog. What was done, in words
    (``registered``, ``kept``, ``moved from …``)."""
    path = table_path(settings, name)
    target = qualified(settings, name)
    entry = describe(spark, settings, name)
    if entry is not None:
        location, kind = entry.get("Location", ""), entry.get("Type", "").upper()
        if _same_place(location, path):
            return "kept"
        if kind != "EXTERNAL" or entry.get("Provider", "").lower() != "delta":
            raise CatalogError(
                f"catalog name {settings.catalog.schema_name}.{name} is a {kind.lower() or '?'} "
                f"{entry.get('Provider', '')} table at {location or '?'}, not the job's "
                f"external Delta table at {path}: drop or rename it, or choose another "
                "catalog.schema")
        spark.sql(f"DROP TABLE {target}")  # external: the name only, never the data
        log.warning("catalog: %s pointed at %s instead of %s: moved", target, location, path)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {target} USING DELTA LOCATION {sql_text(path)}")
    return "registered" if entry is None else f"moved from {entry.get('Location')}"


def create_view(spark: SparkSession, settings: Settings, name: str, comment: str,
                query: str) -> None:
    """``CREATE OR REPLACE VIEW`` (a view's text follows the conf at every start)."""
    entry = describe(spark, settings, name)
    if entry is not None and entry.get("Type", "").upper() != "VIEW":
        raise CatalogError(f"catalog name {settings.catalog.schema_name}.{name} is a table; "
                           "the job keeps a view there: drop or rename it, or choose another "
                           "catalog.schema")
    spark.sql(f"CREATE OR REPLACE VIEW {qualified(settings, name)} "
              f"COMMENT {sql_text(comment)} AS {query}")
