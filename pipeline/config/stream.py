"""How the job runs: ``gaps``, ``initial_state``, ``watermark`` and ``stream``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    field_validator,
)

from pipeline.config.base import INTERVAL, Model


class Gaps(Model):
    """Gap handling: prior-transaction requests, retries and the landing policy."""

    landing_policy: Literal["immediate", "hold"] = "immediate"
    max_requests_per_gap: int = Field(100, ge=1, le=100_000)
    retry_initial_ms: int = Field(10_000, ge=100)
    retry_multiplier: float = Field(2.0, ge=1.0, le=10.0)
    max_retries: int = Field(3, ge=0, le=100)
    hold_timeout_ms: int = Field(300_000, ge=1_000)
    duplicate_window: int = Field(1024, ge=16, le=1_000_000)
    max_buffered_bytes: int = Field(64 * 1024 * 1024, ge=65_536)
    verdict_wait_ms: int = Field(300_000, ge=0)
    clock_skew_ms: int = Field(5_000, ge=0)
    # A partial transaction is lost once the destination sent messages this much later
    # (URBHTIME); on processing time only after partial_stall_ms (a stalled connector).
    partial_timeout_ms: int = Field(60_000, ge=1_000)
    partial_stall_ms: int = Field(3_600_000, ge=1_000)
    # An idle subscription asks the replicator for its last tsnr (STAT; 0: never).
    stat_interval_ms: int = Field(300_000, ge=0)
    # The storm breaker: more gaps or requested tsnrs than this within the window
    # (replicator time) stop requests for the key until `urbpipe gaps resume`.
    storm_window_ms: int = Field(60_000, ge=1_000)
    storm_max_gaps: int = Field(20, ge=1)
    storm_max_tsnrs: int = Field(2_000, ge=1)
    # A tsnr whose resend the replicator confirmed (TRSP response 0) is asked again, and may
    # be given up, only this long after the confirmation.
    confirmed_wait_ms: int = Field(300_000, ge=1_000)


class InitialState(Model):
    """INST requests the job sends after a resend, and how long it waits for their replies."""

    max_isns_per_request: int = Field(500, ge=1, le=100_000)
    reply_timeout_ms: int = Field(600_000, ge=1_000)
    # INST messages a (destination, subscription) keeps in flight; the replicator refuses
    # requests beyond its IMAXREQ with INST/ERRO 131/44 (retried after refused_retry_ms,
    # doubling). max_attempts: requests that may ask for the same ISNs (incomplete answers,
    # refusals) before the request is failed (critical alert).
    max_concurrent_requests: int = Field(2, ge=1, le=64)
    max_attempts: int = Field(3, ge=1, le=20)
    refused_retry_ms: int = Field(60_000, ge=1_000)


class Watermark(Model):
    """The consistency watermark (``pipeline/spark/land/watermark_rule.py``): how late, at
    most, a cluster's nucleus hands a commit to the replicator compared with a transaction of
    the same database committed after it. The watermark of a database is the newest commit
    time of its whole prefix less this: 0 is exact for a plain nucleus (numbered in commit
    order); the default covers a cluster (URBTNUCI) whose nuclei lag up to a second."""

    nucleus_lag_ms: int = Field(1_000, ge=0, le=3_600_000)


class Stream(Model):
    """The streaming job: Kafka source options, trigger, lake and checkpoint locations."""

    lake_dir: str = ".lake"
    checkpoint_dir: str = ".run/checkpoints/stream"
    trigger_interval: str = "5 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = Field(20_000, ge=1)
    # A source topic has one partition (the job refuses more: pipeline/ops/topic_check.py),
    # so Spark's Kafka source would read and decode a whole batch in one task on one core.
    # Spark's ``maxRecordsPerPartition`` splits the offset range into tasks of at most this
    # many records, decoded in parallel; the state stage orders each key's rows by offset
    # again, so the split changes no result (decision 0007).
    source_records_per_task: int = Field(5_000, ge=1)
    fail_on_data_loss: bool = True
    shuffle_partitions: int = Field(4, ge=1, le=2000)
    quarantine_poison: bool = True
    # transformWithStateInPandas keeps batch time flat while a huge transaction is open
    # (decision 0005); applyInPandasWithState stays selectable.
    state_api: Literal["applyInPandasWithState", "transformWithStateInPandas"] = (
        "transformWithStateInPandas")
    metrics_file: str = ".run/metrics.jsonl"
    # The state tasks land a key's leading run of plain messages (whole, in-sequence
    # transactions) column-wise (pipeline/reassembly/fast.py): the same rows and state as
    # ``step`` alone, several times cheaper (decision 0009). Off: every message goes through
    # ``step``.
    fast_path: bool = True
    # Table properties of the job's own tables (pipeline/spark/land/tables.py,
    # ``table_properties``).
    # Delta writes a checkpoint every N commits inside the commit that reaches it, and a batch
    # commits four bulk tables: Delta's default of 10 makes every tenth batch write four
    # checkpoints (decision 0011).
    delta_checkpoint_interval: int = Field(50, ge=1, le=10_000)
    # Min/max statistics for the first N columns (the key columns: names, epoch, tsnr …);
    # Delta's default 32 also covers payload-side columns nobody filters on.
    delta_stats_columns: int = Field(8, ge=-1, le=1_000)
    # How long the tables keep their history (every table the product creates, typed ones
    # included; ``lifetime_properties``): the log's commits for time travel and the change
    # feed, and the files a commit removed, which VACUUM may delete only after this.
    # Delta's defaults (30 and 7 days) are the floor of the second: a shorter one would let
    # VACUUM delete a file a reader or a running batch still needs. The first may be a
    # fraction (0.25: 6 hours): each bulk table's log holds retention / trigger commits and
    # Delta lists it at every commit, so a job at a seconds trigger that runs for weeks
    # wants hours here (pipeline/spark/land/log_growth.py; the job warns at start).
    delta_log_retention_days: float = Field(30, ge=1 / 24, le=36_500)
    # How Delta lists a table's log: ``probing`` the project's own log stores (jvm/logstore),
    # which list from the version asked for, so a commit costs the same whatever the log
    # holds: on a local lake by probing the log's known file names (decision 0017), on S3
    # (s3a://) with ListObjectsV2's StartAfter (decision 0019); ``hadoop`` Delta's own,
    # which read the whole folder at every commit. HDFS is not affected (Delta's store).
    delta_log_store: Literal["probing", "hadoop"] = "probing"
    delta_deleted_file_retention_days: int = Field(7, ge=7, le=36_500)
    # Delta's auto compaction after each commit (``delta.autoOptimize.autoCompact``) on the
    # tables Spark appends to (not ``DIRECT_TABLES``: compaction inside the direct writer's
    # commit would stall the batch; ``urbpipe maintain`` compacts those).
    delta_auto_compact: bool = True
    # Delta Change Data Feed on the current-state typed tables (``current_<sub>_<fnr>``):
    # downstream jobs read what changed since version N (``readChangeFeed``).
    change_feed: bool = True
    # Who writes the bulk tables' data files (pipeline/spark/land/datafiles.py): ``direct`` — the
    # state tasks with pyarrow, committed by the driver through delta-spark; ``spark`` — Spark
    # appends; ``auto`` — direct for a lake on the local file system, Spark otherwise.
    raw_writer: Literal["auto", "direct", "spark"] = "auto"
    prometheus_port: int | None = Field(None, ge=1024, le=65535)
    # Where the endpoint listens: 127.0.0.1 keeps it on the driver's machine; 0.0.0.0 (or the
    # pod's address) lets a cluster's Prometheus scrape the driver (conf/README.md).
    prometheus_address: str = "127.0.0.1"
    # A file is fresh while its newest landed transaction's commit time is at most this old,
    # or its subscription is idle (the STAT probe's answer): the freshness objective the
    # burn-rate alerts of monitoring/prometheus/urbpipe-rules.yml measure.
    freshness_objective_seconds: float = Field(900.0, gt=0)
    gaps: Gaps = Gaps()
    initial_state: InitialState = InitialState()
    watermark: Watermark = Watermark()

    @field_validator("prometheus_address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9.:-]{1,253}$", value.strip()):
            raise ValueError("must be an IP address or host name to listen on (0.0.0.0: all)")
        return value.strip()

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if not INTERVAL.match(value.strip()):
            raise ValueError("must look like '5 seconds', '500 ms' or '1 minute'")
        return value

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, value: str) -> str:
        if value not in ("earliest", "latest") and not value.lstrip().startswith("{"):
            raise ValueError("must be earliest, latest or a JSON offsets object")
        return value
