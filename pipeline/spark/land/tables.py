"""The Delta tables the job lands, their schemas, and where they live.

``gaps`` is append-only, one row per transition; ``seq`` orders the transitions of one batch,
so a gap's current state is its row with the greatest (batch_id, seq).

Column names follow ``pipeline.reassembly.tables`` (the rows the state machine emits); each
table here adds ``batch_id`` (the streaming batch that landed the row) for lineage; every
column carries its comment (``pipeline.spark.land.dictionary``). All tables live under one lake
location (``stream.lake_dir``/<table>); the catalog names them (``pipeline.spark.land.catalog``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.objectstore import is_object_store
from pipeline.spark.land.comments import commented, ensure_comments, marker, sql_text
from pipeline.spark.land.dictionary import comments
from pipeline.spark.land.log_peek import look, properties_of
from pipeline.typed.widening import TablePlan, alter_target, table_plan, widen_steps

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Delta type widening (``ALTER COLUMN … TYPE`` to a wider type, ``pipeline.typed.widening``).
TYPE_WIDENING = {"delta.enableTypeWidening": "true"}

_NAMES = "subscription string, destination string, epoch int"

#: Tables created at once at a start. Creating an empty Delta table is driver work (its first
#: commit, then reading it back); a fresh lake's twelve tables took 4.6-6.6 s one after another
#: on a warm 2-core driver and 3.2 s four at a time.
CREATE_WORKERS = 4

SCHEMAS: dict[str, str] = {
    "transactions": (
        f"{_NAMES}, tsnr bigint, dbid int, record_count int, commit_time timestamp, "
        "processed_time timestamp, sent_time timestamp, initial_state boolean, resent boolean, "
        "possibly_resent boolean, origin string, token string, topic string, "
        "first_partition int, first_offset bigint, last_partition int, last_offset bigint, "
        "image_count int, landed_at timestamp"),
    "records": (
        f"{_NAMES}, tsnr bigint, rsnr bigint, fnr int, isn bigint, type string, "
        "resend boolean, rsp int, subcode bigint, record_time timestamp, dcnt int, errc string"),
    "images": (
        f"{_NAMES}, tsnr bigint, rsnr bigint, dsnr bigint, image_type string, payload binary, "
        "acode bigint, wcode bigint, arc int"),
    "status_events": (
        f"{_NAMES}, rt string, st string, rsp bigint, subc bigint, token string, inam string, "
        "snam string, dnam string, tsnr bigint, dbid int, fnr int, err_info string, "
        "data binary, time timestamp, process_time timestamp, commit_time timestamp, "
        "sent_time timestamp, topic string, partition int, offset bigint, elem_index int, "
        "fields_json string, received_at timestamp, big_endian boolean"),
    "gaps": (
        f"{_NAMES}, gap_id string, from_tsnr bigint, to_tsnr bigint, state string, "
        "requests_sent int, missing_count int, opened_at timestamp, updated_at timestamp, "
        "closed_at timestamp, reason string, seq int, kind string, "
        "filled_tsnrs array<bigint>, settled_tsnrs array<bigint>"),
    "alerts": (
        f"idempotency_key string, kind string, severity string, {_NAMES}, message string, "
        "at timestamp, at_ms bigint, details string"),
    # kind 'TRAN' (tsnr, attempt, gap_id), 'INST' (initial_state, dbid, fnr, isns, request_id;
    # one row per file of a request message) or 'STAT' (request_id stat:<n>)
    "requests": (
        f"{_NAMES}, tsnr bigint, token string, reply_destination string, attempt int, "
        "gap_id string, requested_at timestamp, idempotency_key string, kind string, "
        "initial_state string, dbid int, fnr int, isns array<bigint>, request_id string"),
    "quarantine": (
        f"source string, {_NAMES}, tsnr bigint, reason string, topic string, partition int, "
        "offset bigint, elem_index int, eye string, raw binary, fields_json string, "
        "quarantined_at timestamp"),
    "duplicates": (
        f"{_NAMES}, tsnr bigint, reason string, topic string, partition int, offset bigint, "
        "dropped_at timestamp"),
    # One row per GFFT (URBF) seen: a record layout version of (dbid, fnr) for the
    # subscription, keyed (dbid, fnr, gfid, created = URBFTIM1); repeats share the key.
    # created_stck: the raw unsigned 64-bit STCK in decimal digits (a bigint overflows, and
    # the tables' DDL stays free of commas inside types).
    "layouts": (
        f"{_NAMES}, dbid int, fnr int, gfid string, created timestamp, created_stck string, "
        "file_name string, field_count int, layout_json string, ddl string, gfft_json string, "
        "raw binary, topic string, partition int, offset bigint, elem_index int, "
        "sent_time timestamp, received_at timestamp"),
    # Utility/lifecycle events replayed on the typed tables (pipeline/spark/typed/lifecycle.py): one
    # row per (status event, typed table it concerns), or one with no table when none does.
    "schema_events": (
        "event_id string, subscription string, destination string, st string, dbid int, "
        "fnr int, utility_type int, utility string, detail_json string, action string, "
        "target_table string, result string, reason string, at timestamp, "
        "received_at timestamp, seq int"),
    # Per file status transitions (active/stale/dropped); a file's status is its row with the
    # greatest version. stale_kinds: comma-separated (load, lost, restore …); truncated_before:
    # the latest refresh/define cutoff (changes older than it predate the truncate).
    "file_status": (
        "dbid int, fnr int, status string, stale_kinds string, reason string, since timestamp, "
        "file_name string, version bigint, truncated_before timestamp, event_id string, "
        "st string, action string, run_id string, updated_at timestamp, seq int"),
    # The consistency watermark per (destination, subscription, dbid), after each batch whose
    # commits moved it (pipeline/spark/land/watermark.py): its latest row by computed_at.
    "watermarks": (
        "subscription string, destination string, dbid int, watermark timestamp, "
        "newest_commit timestamp, nucleus_lag_ms int, held_by string, open_gaps int, "
        "gap_ids array<string>, gap_newest array<timestamp>, computed_at timestamp"),
}
#: What the job sent to Kafka, one row per message (a request message, an alert), written
#: right after the producer's flush and tagged with the batch (``kafka_out.RequestsAndAlerts``):
#: a replayed batch sends nothing this table shows it sent. Join ``requests`` or ``alerts`` on
#: idempotency_key to see which were sent. Made at the first send, not at start.
SENT_TABLE = "kafka_sent"
SENT_DDL = ("idempotency_key string, topic string, kind string, subscription string, "
            "destination string, sent_at timestamp, app_id string")
BLOB_COLUMN = {"images": "payload", "status_events": "data", "quarantine": "raw",
               "layouts": "raw"}
TABLES = tuple(SCHEMAS)
#: The stateful stage's output, the batch the writer lands: one row per table row, its columns
#: as JSON and its one binary column (``BLOB_COLUMN``) kept out of the JSON.
OUTPUT_DDL = "table string, json string, blob binary"
#: The state calls' metrics rows in the batch: read by the writer, never landed.
STATS_TABLE = "_stats"
#: How the JSON's times read (ISO 8601 with offset, as the state stage writes them).
TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSSSSS]XXX"
#: Tables the direct writer lands from the state tasks' own Parquet files (every batch brings
#: rows for them); the others stay on the Spark append path (pipeline/spark/land/datafiles.py).
DIRECT_TABLES = ("transactions", "records", "images", "status_events")


def json_schema(table: str) -> str:
    """The schema the JSON part of an output row is parsed with (binary column left out)."""
    blob = BLOB_COLUMN.get(table)
    cols = [c.strip() for c in SCHEMAS[table].split(",")]
    return ", ".join(c for c in cols if not blob or not c.startswith(f"{blob} "))


_COLUMN = re.compile(r"^\s*(\w+)\s+(\w+)(?:<(\w+)>)?\s*$")


def ddl_arrow_schema(ddl: str) -> pa.Schema:
    """A pyarrow schema from a flat Spark DDL string like those of :data:`SCHEMAS` (scalar
    columns and ``array<scalar>``), column for column what Spark declares: the direct writer's
    Parquet files must read back exactly like Spark's own, and the CLI writes ops tables."""
    import pyarrow as pa  # not at module level: the Spark driver imports this module too

    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
             "boolean": pa.bool_(), "binary": pa.binary(), "double": pa.float64(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    fields = []
    for part in ddl.split(","):
        match = _COLUMN.match(part)
        if not match or (match[3] and match[2].lower() != "array"):
            raise ValueError(f"unsupported column definition {part!r}")
        kind = types[(match[3] or match[2]).lower()]
        fields.append(pa.field(match[1], pa.list_(kind) if match[3] else kind))
    return pa.schema(fields)


@cache
def arrow_schema(table: str) -> pa.Schema:
    """The schema the job writes for ``table``: its columns plus ``batch_id`` (built once per
    process: the direct writer asks for it on every state call)."""
    return ddl_arrow_schema(f"{SCHEMAS[table]}, batch_id bigint")


def table_frame(batch: DataFrame, table: str, batch_id: int) -> DataFrame:
    """The typed rows of one table from the generic (table, json, blob) batch."""
    from pyspark.sql import functions as F

    parsed = (batch.where(F.col("table") == table)
              .select(F.from_json("json", json_schema(table),
                                  {"timestampFormat": TS_FORMAT}).alias("r"), "blob"))
    cols = [F.col(f"r.{name.strip().split(' ')[0]}") for name in json_schema(table).split(",")]
    blob = BLOB_COLUMN.get(table)
    if blob:
        cols.append(F.col("blob").alias(blob))
    return parsed.select(*cols, F.lit(batch_id).cast("bigint").alias("batch_id"))


def table_path(settings: Settings, table: str) -> str:
    return f"{settings.location(settings.stream.lake_dir).rstrip('/')}/{table}"


def small_table(spark: SparkSession, settings: Settings, table: str,
                columns: Sequence[str]) -> pa.Table:
    """These columns of every row of one of the job's small tables (``layouts``,
    ``file_status``), on the driver: with the ``deltalake`` package on a file-system lake
    (milliseconds; a Spark job was ~0.3 s, and the typed step reads two every batch), with
    Spark on an object store (whose credentials the driver's Python may not have)."""
    path = table_path(settings, table)
    if not is_object_store(settings.location(settings.stream.lake_dir)):
        from deltalake import DeltaTable

        return DeltaTable(path).to_pyarrow_table(columns=list(columns))
    return spark.read.format("delta").load(path).select(*columns).toArrow()


#: Delta's auto compaction after a commit with new files (delta-spark >= 3.1, a post-commit
#: hook of the writing transaction: it runs inside the write that triggers it).
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
#: Delta Change Data Feed (``readChangeFeed``), on the current-state typed tables.
CHANGE_FEED = "delta.enableChangeDataFeed"


def log_retention(days: float) -> str:
    """Delta's interval for ``stream.delta_log_retention_days``: whole days as days, a
    fraction as whole hours (at least one)."""
    if float(days).is_integer():
        return f"interval {int(days)} days"
    return f"interval {max(1, round(days * 24))} hours"


def lifetime_properties(settings: Settings, *, spark_written: bool) -> dict[str, str]:
    """What keeps a table fast and safe for years, on every table the product creates: how
    long the log and the removed files are kept (time travel, the change feed, and VACUUM's
    floor), and auto compaction where Spark writes the table (``spark_written``: the direct
    writer's commits would compact inside the batch; ``urbpipe maintain`` does those)."""
    stream = settings.stream
    auto = stream.delta_auto_compact and spark_written
    return {"delta.logRetentionDuration": log_retention(stream.delta_log_retention_days),
            "delta.deletedFileRetentionDuration":
                f"interval {stream.delta_deleted_file_retention_days} days",
            AUTO_COMPACT: str(auto).lower()}


def table_properties(settings: Settings, table: str) -> dict[str, str]:
    """Delta properties of the job's own tables, from ``stream.delta_*`` (see config.py)."""
    spark_written = table not in DIRECT_TABLES
    return {"delta.checkpointInterval": str(settings.stream.delta_checkpoint_interval),
            "delta.dataSkippingNumIndexedCols": str(settings.stream.delta_stats_columns),
            **lifetime_properties(settings, spark_written=spark_written)}


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create every table (empty, with its schema, column comments and properties) so analysts
    can query before data lands; bring tables made by an older version or conf up to date."""
    for_each_table(SCHEMAS, lambda table: ensure_table(spark, settings, table))


def ensure_table(spark: SparkSession, settings: Settings, table: str) -> None:
    """One of the job's own tables (``SCHEMAS``) as ``ensure_tables`` makes or updates it."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(f"{SCHEMAS[table]}, batch_id bigint")
    notes = comments(table, schema.fieldNames())
    props = {**table_properties(settings, table), **marker(notes)}
    schema = commented(schema, notes)
    path = table_path(settings, table)
    seen = look(spark, settings, path)
    if seen is None:
        create_if_missing(spark, settings, table, schema, props)
        return
    add_missing_columns(spark, path, schema, seen.schema.fieldNames())
    ensure_comments(spark, path, notes, seen.properties)  # a table made before comments existed
    set_properties(spark, path, props, seen.properties)


def create_if_missing(spark: SparkSession, settings: Settings, table: str, schema: StructType,
                      props: Mapping[str, str]) -> str:
    """Create the table empty at its path unless it exists (the catalog names it after:
    ``pipeline.spark.land.catalog``); its path."""
    from delta.tables import DeltaTable

    path = table_path(settings, table)
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in props.items():
        builder = builder.property(key, value)
    builder.execute()
    return path


def for_each_table(tables: Iterable[str], ensure: Callable[[str], None]) -> None:
    """``ensure(table)`` for every table, ``CREATE_WORKERS`` at a time (each table is its own
    Delta log, so their creations do not meet); the first failure is raised."""
    with ThreadPoolExecutor(CREATE_WORKERS, thread_name_prefix="ensure-table") as pool:
        for _ in pool.map(ensure, tables):
            pass


def set_properties(spark: SparkSession, path: str, props: dict[str, str],
                   have: Mapping[str, str] | None = None) -> None:
    """Set the properties that differ (one commit, none when all match); ``have``: the
    table's properties if the caller just read them."""
    have = properties_of(spark, path) if have is None else have
    changed = {k: v for k, v in props.items() if have.get(k) != v}
    if changed:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(changed.items()))
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({pairs})")


def add_missing_columns(spark: SparkSession, path: str, schema: StructType,
                        have: Iterable[str]) -> None:
    """Additive schema upgrade of a table made by an older version (e.g. ``requests`` before
    its INST columns; ``have``: its columns now): create-if-not-exists leaves an existing
    table as it is, and Delta refuses appends with columns the table does not have."""
    have = set(have)
    missing = [f for f in schema.fields if f.name not in have]
    if missing:
        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}"
                         + (f" COMMENT {sql_text(f.metadata['comment'])}"
                            if "comment" in f.metadata else "") for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")


def schema_types(spark: SparkSession, path: str) -> dict[str, str]:
    """Every column of a Delta table with its type as ``simpleString`` writes it."""
    return {f.name: f.dataType.simpleString()
            for f in spark.read.format("delta").load(path).schema.fields}


def conform_columns(spark: SparkSession, path: str, wanted: dict[str, str]) -> TablePlan:
    """Make a typed table take the ``wanted`` columns (column → type): add the missing ones,
    widen in place the ones it holds narrower (``delta.enableTypeWidening`` is set on the
    table the first time). Idempotent: compares with the schema first, so a replay or a
    second start changes nothing. Columns it cannot take in place (``plan.conflicts``) are
    left as they are: the caller decides (``pipeline.typed.widening.table_plan``)."""
    plan = table_plan(schema_types(spark, path), wanted)
    apply_plan(spark, path, plan)
    return plan


def apply_plan(spark: SparkSession, path: str, plan: TablePlan) -> None:
    """The ALTERs of a plan made from the table's schema (``conform_columns``, or a caller
    that planned first and records before it alters): add, then widen in place."""
    if plan.added:
        cols = ", ".join(f"`{c}` {t}" for c, t in plan.added.items())
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
    if plan.widened:
        set_properties(spark, path, TYPE_WIDENING)
    for column, (old, new) in plan.widened.items():
        for inner, typ in widen_steps(old, new) or []:
            spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN {alter_target(column, inner)} "
                      f"TYPE {typ}")
