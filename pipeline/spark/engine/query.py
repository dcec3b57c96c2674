"""The streaming query: Kafka source → decode → reassemble (stateful) → foreachBatch landing.

``jobs/stream.py`` (spark-submit), the demo and the end-to-end tests all start the job through
``start_stream`` so they run exactly the same plan. This is where the rooms meet: the engine's
plan, the raw landing steps (``pipeline.spark.land``) and the typed ones
(``pipeline.spark.typed``) in one ordered list (``landing_steps``). Metrics leave through the
``observe`` callback its caller passes (``pipeline.ops.metrics.job_metrics``): nothing here
imports the floor above.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.config import Settings
from pipeline.reassembly import ReassemblyConfig
from pipeline.reassembly.config import InitialStateTarget, initial_state_routes
from pipeline.reassembly.routing import Covered, Key
from pipeline.spark.engine.decode_stage import RecordDecoder, arrow_decoder, spark_ddl
from pipeline.spark.engine.lanes import checkpoint_lanes
from pipeline.spark.engine.state_stage import OUTPUT_DDL, STATE_DDL, state_function
from pipeline.spark.land.batch_writer import LandingStep, batch_writer
from pipeline.spark.land.datafiles import data_files
from pipeline.spark.land.file_watch import FileWatch
from pipeline.spark.land.kafka_out import RequestsAndAlerts
from pipeline.spark.land.maintenance import InJobMaintenance
from pipeline.spark.land.raw import RawTables
from pipeline.spark.land.report import (
    BatchCallback,
    BatchReport,
    KeysCallback,
    LatencyCallback,
)
from pipeline.spark.land.tables import ensure_tables
from pipeline.spark.land.watermark import Watermarks
from pipeline.spark.typed.catalog import publish
from pipeline.spark.typed.lifecycle import LifecycleEvents
from pipeline.spark.typed.reconcile import reconcile_tables
from pipeline.spark.typed.stage import TypedTables
from pipeline.spark.typed.stream_layouts import NextLayouts
from pipeline.spark.typed.tables import TypedTableSet, select_tables

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

QUERY_NAME = "urbpipe"
log = logging.getLogger("urbpipe.query")


def reassembly_config(settings: Settings) -> ReassemblyConfig:
    g = settings.stream.gaps
    inst = settings.stream.initial_state
    return ReassemblyConfig(
        landing_policy=g.landing_policy, max_requests_per_gap=g.max_requests_per_gap,
        retry_initial_ms=g.retry_initial_ms, retry_multiplier=g.retry_multiplier,
        max_retries=g.max_retries, hold_timeout_ms=g.hold_timeout_ms,
        duplicate_window=g.duplicate_window, max_buffered_bytes=g.max_buffered_bytes,
        verdict_wait_ms=g.verdict_wait_ms, clock_skew_ms=g.clock_skew_ms,
        partial_timeout_ms=g.partial_timeout_ms, partial_stall_ms=g.partial_stall_ms,
        stat_interval_ms=g.stat_interval_ms or None, storm_window_ms=g.storm_window_ms,
        storm_max_gaps=g.storm_max_gaps, storm_max_tsnrs=g.storm_max_tsnrs,
        confirmed_wait_ms=g.confirmed_wait_ms,
        tod_offset_us=settings.replicator.tod_offset_us,
        reply_destination=settings.replicator.reply_destination,
        request_token=settings.replicator.request_token,
        initial_states=tuple(InitialStateTarget(
            s.name, s.initial_state, s.file_keys(), tuple(s.destinations))
            for s in settings.subscriptions if s.initial_state),
        max_isns_per_request=inst.max_isns_per_request,
        initial_state_timeout_ms=inst.reply_timeout_ms,
        initial_state_max_requests=inst.max_concurrent_requests,
        initial_state_max_attempts=inst.max_attempts,
        initial_state_retry_ms=inst.refused_retry_ms)


def covered_subscriptions(settings: Settings) -> dict[str, list[Covered]]:
    """Each destination's configured subscriptions with their database and files."""
    out: dict[str, list[Covered]] = {}
    for s in settings.subscriptions:
        for d in s.destinations:
            out.setdefault(d, []).append(Covered(s.name, frozenset(s.file_keys())))
    return out


def record_decoder(settings: Settings, lanes: Mapping[Key, int] | None = None,
                   config: ReassemblyConfig | None = None) -> RecordDecoder:
    """The decode and state stages' decoder for this conf (``config``: the reassembly
    config, if already built)."""
    control = settings.topics.control
    destinations = {t: settings.destination_of(t) for t in settings.source_topics()
                    if t != control}
    homes = {s.name: s.destinations[0] for s in settings.subscriptions
             if len(s.destinations) == 1}
    default = settings.topics.pattern_destination or next(iter(destinations.values()))
    config = config or reassembly_config(settings)
    inst = initial_state_routes(config.initial_states, config.request_token)
    return RecordDecoder(destinations, default, settings.replicator.codepage, homes,
                         inst.by_name, lanes, inst.replies, covered_subscriptions(settings),
                         control)


def kafka_source(spark: SparkSession, settings: Settings) -> DataFrame:
    """The job's source: the Kafka records' coordinates, key and value."""
    return kafka_reader(spark, settings).select("topic", "partition", "offset", "key", "value")


def kafka_reader(spark: SparkSession, settings: Settings) -> DataFrame:
    """Spark's Kafka source with every option conf gives it, all of Kafka's columns (also
    what bench_pipeline's raw passthrough reads, so both phases read alike)."""
    st = settings.stream
    reader = (spark.readStream.format("kafka").options(**settings.kafka.spark())
              .option("groupIdPrefix", settings.kafka.group_id_prefix))  # for group ACLs
    if settings.topics.output_pattern:
        reader = reader.option("subscribePattern", settings.topics.output_pattern)
    else:
        reader = reader.option("subscribe", ",".join(settings.source_topics()))
    return (reader.option("startingOffsets", st.starting_offsets)
            .option("maxOffsetsPerTrigger", st.max_offsets_per_trigger)
            .option("maxRecordsPerPartition", st.source_records_per_task)
            .option("failOnDataLoss", str(st.fail_on_data_loss).lower())
            .load())


def build_plan(spark: SparkSession, settings: Settings,
               lanes: Mapping[Key, int] | None = None) -> DataFrame:
    """The streaming DataFrame of (table, json, blob) output rows. The state is keyed by
    (lane, destination, subscription): ``lanes`` spread the configured keys over the stateful
    step's tasks (``pipeline.spark.engine.lanes``)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    config = reassembly_config(settings)
    decoder = record_decoder(settings, lanes, config)
    log.info("routing scan: %s", "compiled (pipeline/urb/native) for well-formed messages, "
             "Python for the rest" if decoder.native_scan else
             "pure Python (pipeline/urb/native/liburbwalk.so not built: make setup builds "
             "it where rustc is installed; same rows, slower)")
    files = data_files(settings)  # None: Spark appends every table (stream.raw_writer)
    messages = kafka_source(spark, settings).mapInArrow(arrow_decoder(decoder), spark_ddl())
    grouped = messages.groupBy("lane", "destination", "subscription")
    if settings.stream.state_api == "transformWithStateInPandas":
        # Open transactions' images in append-only list state (decision 0005).
        # Imported only when chosen: it needs pyspark's StatefulProcessor and protobuf.
        from pipeline.spark.engine.state_tws import ReassemblyProcessor

        return grouped.transformWithStateInPandas(
            statefulProcessor=ReassemblyProcessor(config, decoder, files,
                                                  settings.stream.fast_path),
            outputStructType=OUTPUT_DDL, outputMode="Append", timeMode="ProcessingTime")
    return grouped.applyInPandasWithState(
        state_function(config, decoder, files, settings.stream.fast_path), OUTPUT_DDL,
        STATE_DDL,
        "append", GroupStateTimeout.ProcessingTimeTimeout)


def checkpoint_app_id(spark: SparkSession, checkpoint: str) -> str:
    """The query id stored in the checkpoint (created here on first start).

    Delta's txnAppId must change when the checkpoint is lost (batch ids restart at 0), so it is
    derived from the checkpoint's own identity: Spark's ``metadata`` file, which Spark reads
    back on every restart. Uses Hadoop's FileSystem, so it works on any checkpoint store.
    """
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/metadata")
    fs = path.getFileSystem(conf)
    if not fs.exists(path):
        stream = fs.create(path, False)
        stream.write(json.dumps({"id": str(uuid.uuid4())}).encode())
        stream.close()
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return f"urbpipe-{json.loads(text.splitlines()[0])['id']}"


class QueryObserver(Protocol):
    """Who watches the running query (``pipeline.ops.metrics.JobMetrics`` for the job)."""

    def batch_done(self, batch_id: int, counts: dict[str, int], seconds: float) -> None: ...

    def batch_latency(self, batch_id: int, times: np.ndarray) -> None:
        """``times``: ``pipeline.spark.land.report.latency_times``."""

    def batch_keys(self, batch_id: int, stats: list[dict[str, Any]]) -> None: ...

    def started(self, query: StreamingQuery) -> None: ...


def landing_steps(settings: Settings, on_batch: BatchCallback | None = None,
                  on_latency: LatencyCallback | None = None,
                  on_keys: KeysCallback | None = None) -> list[LandingStep]:
    """The batch writer's steps, in order: raw tables; with conf layouts the typed tables, and
    the lifecycle events after them; requests and alerts (its producer connects now); the
    consistency watermark (after every Delta commit of the batch); the batch's metrics. The
    typed steps share one record of the typed tables made so far and
    the layouts that decode each file's next images (worked out once per batch). With
    ``maintenance.every_minutes`` the job's compaction runs before the report, and the file
    watch (``maintenance.watch_minutes``) after it."""
    steps: list[LandingStep] = [RawTables(settings)]
    typed, layouts = TypedTableSet(settings), NextLayouts()
    if settings.layouts:
        steps.append(TypedTables(settings, typed, layouts))
    steps += [LifecycleEvents(settings, typed, layouts), RequestsAndAlerts(settings),
              Watermarks(settings)]  # after every commit of the batch: never ahead of them
    if settings.maintenance.every_minutes is not None:
        steps.append(InJobMaintenance(settings, select_tables(settings)))
    if settings.maintenance.watch_minutes and settings.maintenance.alert_files:
        steps.append(FileWatch(settings, select_tables(settings)))
    steps.append(BatchReport(on_batch, on_latency, on_keys))
    return steps


def start_stream(spark: SparkSession, settings: Settings, *,
                 on_batch: BatchCallback | None = None,
                 trigger_interval: str | None = None,
                 observe: Callable[[SparkSession, Settings], QueryObserver] | None = None,
                 ) -> StreamingQuery:
    """Create the tables, then start the query from its checkpoint. ``observe(spark,
    settings)`` (the job's metrics: ``pipeline.ops.metrics.job_metrics``) is called once the
    tables and lanes are ready; its observer hears of every batch and of the started query.
    ``on_batch(batch_id, table_counts, seconds)`` is called after every batch's writes."""
    ensure_tables(spark, settings)
    reconcile_tables(spark, settings)  # typed tables follow the conf layouts (LayoutConflict)
    for line in publish(spark, settings):  # the catalog names every table (catalog.enabled)
        log.info("catalog: %s", line)
    checkpoint = settings.location(settings.stream.checkpoint_dir)
    app_id = checkpoint_app_id(spark, checkpoint)
    lanes = checkpoint_lanes(spark, settings, checkpoint)
    observer = observe(spark, settings) if observe is not None else None

    def batch_done(batch_id: int, counts: dict[str, int], seconds: float) -> None:
        if observer is not None:
            observer.batch_done(batch_id, counts, seconds)
        if on_batch is not None:
            on_batch(batch_id, counts, seconds)

    latency = observer.batch_latency if observer is not None else None
    keys = observer.batch_keys if observer is not None else None
    steps = landing_steps(settings, batch_done, latency, keys)
    query = (build_plan(spark, settings, lanes).writeStream
             .foreachBatch(batch_writer(settings, app_id, steps))
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=trigger_interval or settings.stream.trigger_interval)
             .queryName(QUERY_NAME).start())
    if observer is not None:
        observer.started(query)
    return query
