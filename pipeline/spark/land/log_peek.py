"""What a table's Delta log says now (columns, their comments and types, properties), read
without the JVM when possible.

Every start checks every table the job lands (its own twelve, three per layout) and changes
none of them unless the version or conf changed. Spark reads each of those logs in a fresh
JVM at ~0.5-1 s apiece (classes, the Hadoop file system, a snapshot): most of a restart went
to checks that found nothing to do. ``deltalake`` (delta-rs) reads the same log in a few
milliseconds. Spark still makes every change, and answers whenever delta-rs cannot read a
table (a table feature it does not know, an object store whose credentials the driver's
Python does not have): the answer is the same, only slower.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.objectstore import ENV_CREDENTIALS, access, delta_uri, is_object_store

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("urbpipe.tables")


@dataclass(frozen=True)
class TableLook:
    """One table as its log says it is now."""

    schema: StructType                # Spark's types, each column's comment in its metadata
    properties: Mapping[str, str]     # the table's properties (``TBLPROPERTIES``)

    def types(self) -> dict[str, str]:
        """Column → type as Spark's ``simpleString`` writes it."""
        return {f.name: f.dataType.simpleString() for f in self.schema.fields}


def look(spark: SparkSession, settings: Settings, path: str) -> TableLook | None:
    """The Delta table at ``path``; None when there is none."""
    known, found = by_delta_rs(settings, path)
    return found if known else by_spark(spark, path)


def by_delta_rs(settings: Settings, path: str) -> tuple[bool, TableLook | None]:
    """(True, the table or None) as delta-rs reads it; (False, None) when it cannot tell."""
    from pyspark.sql.types import StructType

    known, table = _open(settings, path)
    if table is None:
        return known, None
    try:
        schema = StructType.fromJson(json.loads(table.schema().to_json()))
    except Exception as exc:  # a type Spark's Python does not know: Spark answers instead
        log.debug("delta-rs cannot read %s (%s): Spark reads it", path, exc)
        return False, None
    return True, TableLook(schema, dict(table.metadata().configuration))


def file_count(settings: Settings, path: str) -> tuple[int, int] | None:
    """(data files, bytes) of the table's newest version as delta-rs reads its log (the add
    actions, no data file opened); None when delta-rs cannot read it."""
    _, table = _open(settings, path)
    if table is None:
        return None
    adds = table.get_add_actions(flatten=True)
    sizes = adds.column("size_bytes").to_pylist() if adds.num_rows else []
    return len(sizes), sum(sizes)


def _open(settings: Settings, path: str) -> tuple[bool, DeltaTable | None]:
    """(True, the table or None when there is none) as delta-rs opens it; (False, None)
    when it cannot (a table feature it does not know, no credentials, …)."""
    from deltalake import DeltaTable

    options = _storage_options(settings, path)
    if options is None:
        return False, None
    uri = delta_uri(path)
    try:
        if not DeltaTable.is_deltatable(uri, storage_options=options or None):
            return True, None
        return True, DeltaTable(uri, storage_options=options or None)
    except Exception as exc:  # any reason at all: Spark answers instead
        log.debug("delta-rs cannot read %s (%s): Spark reads it", path, exc)
        return False, None


def _storage_options(settings: Settings, path: str) -> dict[str, str] | None:
    """delta-rs's options for ``path``: none for a file system, the conf's store with the
    environment's keys for an object store; None when the keys are not in this process."""
    if not is_object_store(path):
        return {}
    if not all(os.environ.get(k) for k in ENV_CREDENTIALS):
        return None
    return access(settings).storage_options()


def by_spark(spark: SparkSession, path: str) -> TableLook | None:
    """The table as Spark reads it (what ``by_delta_rs`` must agree with)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return TableLook(spark.read.format("delta").load(path).schema, properties_of(spark, path))


def properties_of(spark: SparkSession, path: str) -> dict[str, str]:
    """The table's properties as Spark reads them now."""
    # SHOW TBLPROPERTIES reads the table's metadata only; DESCRIBE DETAIL would rebuild the
    # table's state (file counts) for every table at every start.
    return {r["key"]: r["value"]
            for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
