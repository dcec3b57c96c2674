"""Running the lake: ``maintenance``, ``spark``, ``object_store``, ``catalog`` and
``alertmanager``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
)

from pipeline.config.base import Model, parse_size

#: Spark/Hadoop keys that hold an object store's secret (also per bucket,
#: ``fs.s3a.bucket.<b>.secret.key``): a conf file is copied, committed and shown, a secret never
#: belongs in one, so these are refused (give them through the environment).
_SECRET_CONF = re.compile(
    r"^(spark\.hadoop\.)?fs\.s3a\.(bucket\.[^.]+\.)?(access\.key|secret\.key|session\.token)$"
    r"|^(spark\.hadoop\.)?fs\.azure\.account\.key(\..+)?$")
#: Delta's S3 start-after listing of ``_delta_log``: broken with the jars the product ships
#: (delta-storage 4.4 calls an S3A listing method hadoop-aws 3.5.0 lacks: ``NoSuchMethodError``
#: at the job's first commit, conf/README.md), so refused at start instead.
_FAST_S3A_LIST = "spark.hadoop.delta.enableFastS3AListFrom"



class Reconcile(Model):
    """``urbpipe reconcile`` (``pipeline.ops.reconcile_cmd``): the lake's typed tables compared
    with Adabas through INST by ISN list."""

    # ISNs a round asks for per file when neither --isns nor --full chooses them.
    sample: int = Field(100, ge=1, le=1_000_000)
    # A full round's cap per file: it asks for at most this many ISNs, the next ones after
    # where the file's previous full round stopped; the file is verified when a cycle of such
    # rounds has reached its last ISN (every part equal). None: all of them in one round.
    full_round_isns: int | None = Field(None, ge=1, le=10_000_000)
    # ISNs one INST request lists (the replicator's limit on an ISN list); the round sends its
    # requests one at a time (one in flight: never refused by the replicator's IMAXREQ).
    max_isns_per_request: int = Field(500, ge=1, le=100_000)
    # How long a round waits for the replicator's replies, for the job to land the answers,
    # and for the watermark to pass the answers' read time.
    timeout_seconds: float = Field(300.0, gt=0)
    # A file whose share of drifted ISNs in a round passes this is named a warning in the
    # round's output (any drift is exit code 6; the ratio names the files worth a look first).
    drift_warning_ratio: float = Field(0.01, ge=0, le=1)
    # The repair (read by the job): the answers of a round land like any initial-state
    # record, so a row found different or missing takes the answered image as its new version
    # and a row Adabas does not have is removed with a tombstone. false: the answers land in
    # changes_ only (origin 'reconcile') and a round reports drift without changing a row.
    repair: bool = True
    # In-job rounds (pipeline/ops/reconcile_schedule.py): every this many minutes the running
    # job runs a round (``scheduled_round``: a random ``sample`` per file, or ``full``: every
    # ISN the lake knows) in a driver thread; its figures are metrics (urbpipe_reconcile_*).
    # None: off (run ``urbpipe reconcile`` from a scheduler instead).
    every_minutes: float | None = Field(None, gt=0)
    scheduled_round: Literal["sample", "full"] = "sample"


class Maintenance(Model):
    """Compaction, vacuum and log checkpoints of the job's tables (``urbpipe maintain``,
    ``pipeline.ops.maintain``)."""

    # Which tables: "all" (every table the job writes that exists) or a list of names.
    tables: Literal["all"] | list[str] = "all"
    # Compaction's target: files smaller than this are packed into files of about this size.
    target_file_size: str = "128MB"
    # VACUUM keeps unreferenced files younger than this; never shorter than Delta's 7 days,
    # ``stream.delta_deleted_file_retention_days`` or ``commit_wait_hours``
    # (``pipeline.ops.maintain_plan.vacuum_retention_hours``).
    vacuum_retention_hours: int = Field(168, ge=168)
    # The longest a direct-writer file can wait for its commit: a state task writes it during
    # a batch and the driver commits it at that batch's end, so this is the longest batch.
    # A file younger than this may still be committed: VACUUM must not delete it.
    commit_wait_hours: float = Field(24.0, gt=0)
    # In-job compaction (pipeline/spark/land/maintenance.py, ``InJobMaintenance``): every this
    # many minutes the running job compacts its tables between batches, as many per batch as
    # fit in ``max_pause_seconds`` (plus the one it is on). None: off (``urbpipe maintain``).
    every_minutes: float | None = Field(None, gt=0)
    max_pause_seconds: float = Field(30.0, gt=0)
    # The file watch (pipeline/spark/land/file_watch.py): every this many minutes the job
    # counts each table's data files (from the Delta log) and sends a warning alert
    # (table_files_high, once per table and day) for a table over ``alert_files``: its
    # compaction is not keeping up. None (either): off.
    watch_minutes: float | None = Field(15.0, gt=0)
    alert_files: int | None = Field(5000, ge=1)

    @field_validator("target_file_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if parse_size(value) < 1 << 20:
            raise ValueError("must be at least 1MB")
        return value

    @property
    def target_file_bytes(self) -> int:
        return parse_size(self.target_file_size)


class SparkSettings(Model):
    """The Spark session: master, memory, extra conf, and where the JVM jars were resolved."""

    master: str = "local[*]"
    app_name: str = "urbpipe"
    driver_memory: str = "2g"
    jars_dir: str = ".jars/spark"
    log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = "WARN"
    # Hadoop's file system for ``file:`` paths when the master is ``local[…]``: ``nio``, the
    # project's (jvm/localfs, decision 0020), which sets permissions and reads link status
    # through Java NIO where Hadoop without its native library forks ``chmod`` and
    # ``readlink`` for each file; ``hadoop``, Hadoop's own. On a cluster master: Hadoop's.
    local_file_system: Literal["nio", "hadoop"] = "nio"
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(k for k in value if _SECRET_CONF.match(k))
        if secret:
            raise ValueError(f"{', '.join(secret)}: credentials never come from the conf file; "
                             "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and "
                             "AWS_SESSION_TOKEN) in the environment of the driver and executors")
        if value.get(_FAST_S3A_LIST, "false").strip().lower() == "true":
            raise ValueError(f"{_FAST_S3A_LIST}: delta-storage 4.4's start-after listing calls "
                             "S3A's Listing.createFileStatusListingIterator with a signature "
                             "hadoop-aws 3.5.0 does not have: the job's first commit would fail "
                             "with NoSuchMethodError. Leave it unset")
        return value


#: URI schemes served by the S3A connector (``object_store``); the job maps them to the
#: s3 file system of pyarrow, which does not know the name ``s3a``.
OBJECT_STORE_SCHEMES = ("s3a",)


class ObjectStore(Model):
    """The S3-compatible store behind ``s3a://`` lake and checkpoint locations: where it is and
    how it is addressed, never who the job is (credentials come from the environment only).

    Used by Spark's S3A connector (``fs.s3a.*``, ``pipeline.objectstore.spark_conf``) and by
    the direct writer's pyarrow S3 file system in the Python workers, so both reach the same
    store the same way. ``endpoint`` None: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` from
    the environment, else AWS itself. ``checkpoint_manager``: how Spark writes checkpoint
    files there (conf/README.md, "object_store").
    """

    endpoint: str | None = None
    region: str | None = None
    path_style_access: bool = False
    credentials: Literal["environment", "default"] = "environment"
    checkpoint_manager: Literal["abortable", "rename"] = "abortable"
    jars_dir: str = ".jars/s3"

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            endpoint_url(value)
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[a-z0-9-]{2,32}$", value):
            raise ValueError("must be a region name such as eu-central-1")
        return value


def endpoint_url(value: str) -> str:
    """An object-store endpoint as ``http(s)://host[:port]``; ValueError naming what is wrong.
    User info is refused: a key in the URL would be a secret in the conf file."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(value)
        port = url.port
    except ValueError:
        raise ValueError(f"endpoint {value!r} is not a URL") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"endpoint {value!r} must look like https://host[:port] "
                         "(http:// for a store without TLS)")
    if url.username or url.password:
        raise ValueError("endpoint must not carry credentials: give them through the "
                         "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    if url.path.strip("/") or url.query or url.fragment:
        raise ValueError(f"endpoint {value!r} must name the server only, no path: the bucket "
                         "is part of the s3a:// location")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return f"{url.scheme}://{host}" + (f":{port}" if port else "")


_SCHEMA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,127}$")


class LocalMetastore(Model):
    """The embedded setup's metastore database (``catalog.metastore: local``): Apache Derby
    run as a network server on 127.0.0.1 (``pipeline/spark/engine/metastore.py``), so the job,
    an analyst's notebook and the SQL endpoint (each its own JVM) share one catalog; Derby
    embedded admits one JVM at a time. ``dir`` None: beside the lake (``<lake_dir>-catalog``;
    ``.run/catalog`` for a lake on an object store)."""

    port: int = Field(1527, ge=1024, le=65535)
    dir: str | None = None
    heap: str = "256m"
    jars_dir: str = ".jars/catalog"


class SqlServer(Model):
    """Spark's Thrift JDBC/ODBC server on the catalog (``urbpipe catalog serve``): where BI
    tools (Tableau, Power BI, DBeaver, beeline) connect, HiveServer2's binary protocol."""

    host: str = "127.0.0.1"
    port: int = Field(10000, ge=1024, le=65535)


class Catalog(Model):
    """Where analysts find the tables by name: a Hive metastore through Spark's Hive support.

    ``enabled``: the job creates ``schema`` and registers every table it writes there as an
    external Delta table at its path, with the trustworthy-snapshot views
    (``pipeline/spark/land/catalog.py``). ``metastore``: ``local`` — the project's own Derby
    network server (``local``); ``spark`` — whatever ``spark.conf`` (or a ``hive-site.xml``
    on the class path) names: an external Hive metastore (``spark.hadoop.hive.metastore.uris``)
    or AWS Glue (``spark.hadoop.hive.metastore.client.factory.class`` and its client jar)."""

    # ``schema`` in conf; ``schema_name`` in Python (pydantic's BaseModel has a ``schema``)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # off unless a conf asks: conf/local.yaml (the embedded setup) and the cluster example do
    enabled: bool = False
    schema_name: str = Field("urbpipe", alias="schema")
    metastore: Literal["local", "spark"] = "local"
    local: LocalMetastore = LocalMetastore()
    sql_server: SqlServer = SqlServer()

    @field_validator("schema_name")
    @classmethod
    def _schema(cls, value: str) -> str:
        if not _SCHEMA_NAME.match(value):
            raise ValueError("must be a lower-case identifier (letters, digits, _)")
        return value


#: Where monitoring/prometheus/urbpipe-rules.yml and the alerts the job posts send an on-call
#: engineer: docs/runbook.md as your copy of the repository serves it (conf/README.md).
DEFAULT_RUNBOOK_URL = "https://urbpipe.invalid/docs/runbook.md"
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Alertmanager(Model):
    """The job's own alerts posted to Alertmanager's API (``pipeline.alertmanager``), beside
    the alerts topic and table: a gap's alert fires while it is open or unrecoverable and is
    resolved when it fills (the job) or an operator acknowledges it (``urbpipe gaps ack``)."""

    url: str | None = None
    # Added to every alert posted (e.g. cluster, team); alertname, severity, destination,
    # subscription and the alert's own identity are the job's.
    labels: dict[str, str] = Field(default_factory=lambda: {"job": "urbpipe"})
    # A firing alert's endsAt: it stays firing this long unless resolved before (a gap
    # filled, acknowledged; a breaker resumed) ...
    hold_hours: float = Field(168.0, gt=0)
    # ... and an alert about one event (a rejected request, a lost continuation …) this long.
    event_hours: float = Field(24.0, gt=0)
    timeout_seconds: float = Field(5.0, gt=0, le=120)
    runbook_url: str = DEFAULT_RUNBOOK_URL

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+(/[^\s]*)?$", value):
            raise ValueError("must look like http://alertmanager:9093")
        return value.rstrip("/") if value else value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"label {name!r} is not a Prometheus label name")
        return value


#: Columns every typed change/current-state row carries; a layout's columns must not reuse them.
