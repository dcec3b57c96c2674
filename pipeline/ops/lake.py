"""Reading (and for ops tables, writing) the Delta lake without Spark.

The operator CLI must answer in about a second, so it reads the job's tables with the
``deltalake`` (delta-rs) package instead of starting a JVM. Only the columns a command needs are
read. Tables the job has not created yet read as empty; a lake location with no table at all is
reported as unreachable (wrong conf, or storage not mounted).

A lake on ``s3a://`` is read (and the ops tables written) through the conf's
``object_store`` (endpoint, region, addressing; credentials from the environment) as
delta-rs names it (``s3://``, ``storage_options``): the same store the job writes, never
AWS's defaults or the instance metadata.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from pipeline.config import Settings
from pipeline.errors import LakeUnreachable
from pipeline.objectstore import access, delta_uri, is_object_store
from pipeline.spark.land.tables import SCHEMAS, arrow_schema, table_path

#: delta-rs on S3 commits by a conditional put of the log entry (If-None-Match): two writers
#: of one ops table cannot both win, and no lock table (DynamoDB) is needed.
S3_WRITE_OPTIONS = {"conditional_put": "etag"}


class Lake:
    """The tables under ``stream.lake_dir`` of one conf."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.location(settings.stream.lake_dir).rstrip("/")
        self.options: dict[str, str] | None = (
            access(settings).storage_options() if is_object_store(self.root) else None)

    def path(self, table: str) -> str:
        """The table's location as delta-rs names it (``s3://`` for ``s3a://``)."""
        return delta_uri(table_path(self.settings, table))

    def table(self, table: str) -> DeltaTable | None:
        """The table; None before the job made it."""
        try:
            return DeltaTable(self.path(table), storage_options=self.options)
        except TableNotFoundError:
            return None
        except OSError as exc:
            raise LakeUnreachable(f"cannot read {self.path(table)}: {exc}") from None

    def exists(self, table: str) -> bool:
        try:
            return DeltaTable.is_deltatable(self.path(table), storage_options=self.options)
        except OSError as exc:
            raise LakeUnreachable(f"lake {self.root}: {exc}") from None

    def require(self) -> None:
        """Raise LakeUnreachable unless at least one of the job's tables is there."""
        if not any(self.exists(t) for t in SCHEMAS):
            raise LakeUnreachable(f"no Delta tables under {self.root} (has the job run? "
                                  "is stream.lake_dir right?)")

    def columns(self, table: str) -> list[str]:
        """The table's column names as written (a table made by an older job version may lack
        newer ones); none when it does not exist yet."""
        found = self.table(table)
        return [] if found is None else found.schema().to_arrow().names

    def read(self, table: str, columns: Sequence[str] | None = None,
             schema: pa.Schema | None = None) -> pa.Table:
        """The table's rows (only ``columns``); an empty table when it does not exist yet."""
        schema = schema or arrow_schema(table)
        found = self.table(table)
        if found is None:
            empty = schema if not columns else pa.schema([schema.field(c) for c in columns])
            return empty.empty_table()
        try:
            # use_threads=False: pyarrow's scan threads racing interpreter exit abort the
            # process now and then ("terminate called without an active exception",
            # delta-rs#2184, arrow#34314); the ops tables are small enough for one thread.
            return found.to_pyarrow_dataset().to_table(
                columns=list(columns) if columns else None, use_threads=False)
        except OSError as exc:
            raise LakeUnreachable(f"cannot read {self.path(table)}: {exc}") from None

    def append(self, table: str, rows: pa.Table, *, add_columns: bool = False) -> None:
        """Append rows to an ops-owned table, creating it on first use; ``add_columns``: the
        rows may bring columns a table made by an earlier version lacks (they are added)."""
        options = {**self.options, **S3_WRITE_OPTIONS} if self.options is not None else None
        try:
            write_deltalake(self.path(table), rows, mode="append", storage_options=options,
                            schema_mode="merge" if add_columns else None)
        except OSError as exc:
            raise LakeUnreachable(f"cannot write {self.path(table)}: {exc}") from None
