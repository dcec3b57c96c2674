"""foreachBatch sink: Delta tables exactly once, then requests and alerts to Kafka.

Exactly once into Delta: every append is tagged with the app id (derived from the checkpoint's
query id, so a lost checkpoint that restarts batch ids at 0 gets a new app id) and the batch id,
and skipped when the table's log shows that batch already landed (``pipeline.spark.land.ledger``;
Delta's own txnAppId/txnVersion when the log cannot tell), so a batch replayed after a crash
lands nothing twice. The state function is deterministic, so the
replayed batch's rows are the ones that were (or were not) committed.

Kafka sends come after the Delta commits and are at-least-once: a replay re-sends them, and
each carries an idempotency key (Kafka key and header) so the replicator's side and alert
consumers can drop repeats.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops.errors import KafkaRefused
from pipeline.reassembly.outbound import RequestForm, request_messages
from pipeline.spark.engine.state_stage import STATS_TABLE
from pipeline.spark.land.committer import DeltaCommitter
from pipeline.spark.land.datafiles import BATCH_PROPERTY, FILES_TABLE, writer_mode
from pipeline.spark.land.ledger import CommitLedger
from pipeline.spark.land.tables import BLOB_COLUMN, DIRECT_TABLES, TABLES, json_schema, table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("urbpipe.sink")
_WRITERS = 4
_TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSSSSS]XXX"


def table_frame(batch: DataFrame, table: str, batch_id: int) -> DataFrame:
    """The typed rows of one table from the generic (table, json, blob) batch."""
    from pyspark.sql import functions as F

    parsed = (batch.where(F.col("table") == table)
              .select(F.from_json("json", json_schema(table),
                                  {"timestampFormat": _TS_FORMAT}).alias("r"), "blob"))
    cols = [F.col(f"r.{name.strip().split(' ')[0]}") for name in json_schema(table).split(",")]
    blob = BLOB_COLUMN.get(table)
    if blob:
        cols.append(F.col("blob").alias(blob))
    return parsed.select(*cols, F.lit(batch_id).cast("bigint").alias("batch_id"))


def _write_delta(frame: DataFrame, path: str, app_id: str, batch_id: int,
                 ledger: CommitLedger) -> None:
    """Append once: skipped if the table's log shows this batch landed (``ledger``), else
    tagged so a replay can tell; txnAppId/txnVersion only when the log cannot tell."""
    landed = ledger.landed(path, batch_id)
    if landed:
        log.info("batch %s already in %s: skipped", batch_id, path)
        return
    writer = (frame.write.format("delta").mode("append")
              .option("userMetadata", ledger.tag(batch_id)))
    if landed is None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
    writer.save(path)


class KafkaUnreachable(RuntimeError):
    """The job's producer could not reach Kafka at start."""


class KafkaOut:
    """Producer for requests and alerts, on the driver."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: Any = None
        self._errors = ClientErrors()  # librdkafka's error_cb: why a first contact failed

    def connect(self, timeout_s: float = 30.0) -> None:
        """Create the producer and fetch the cluster's metadata: the job finds out at start,
        in one line, that Kafka is out of reach, and its first batch need not connect."""
        from confluent_kafka import KafkaException

        try:
            self._ensure().list_topics(timeout=timeout_s)
        except KafkaException as exc:
            self._producer.poll(0.5)  # librdkafka serves error_cb (the SASL/TLS errors) here
            refusal = self._errors.refusal(self._settings.kafka, *exc.args)
            if refusal is not None:  # a wrong password is not "cannot reach"
                raise KafkaRefused(refusal.message) from None
            raise KafkaUnreachable(
                f"cannot reach Kafka at {self._settings.kafka.bootstrap_servers} within "
                f"{timeout_s:g} s: {exc.args[0] if exc.args else exc}") from None

    def send(self, topic: str, key: str, value: bytes, headers: dict[str, str]) -> None:
        self._ensure().produce(topic, key=key.encode(), value=value,
                               headers=list(headers.items()))

    def _ensure(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            quiet = logging.getLogger("urbpipe.kafka.producer")
            quiet.setLevel(logging.ERROR)  # librdkafka's transient coordinator chatter
            self._producer = Producer({**self._settings.kafka.confluent(),
                                       "enable.idempotence": "true", "linger.ms": "5",
                                       "error_cb": self._errors}, logger=quiet)
        return self._producer

    def flush(self) -> None:
        if self._producer is not None and self._producer.flush(30) > 0:
            raise RuntimeError("Kafka did not acknowledge all requests/alerts within 30s")


def request_form(settings: Settings) -> RequestForm:
    rep = settings.replicator
    return RequestForm(rep.reply_destination, rep.request_token, rep.ebcdic, rep.big_endian,
                       rep.codepage)


_LOGGED = ("subscription", "destination", "epoch", "tsnr", "attempt", "request_id",
           "initial_state", "dbid", "idempotency_key")


def send_requests_and_alerts(settings: Settings, out: KafkaOut, requests: list[dict[str, Any]],
                             alerts: list[dict[str, Any]]) -> None:
    """Requests to the replicator's input topic (``pipeline.reassembly.outbound``: an INST
    request's rows are one message), then the alerts; both carry their idempotency key."""
    for msg in request_messages(requests, request_form(settings)):
        first = msg.rows[0]
        if msg.value is None:  # the codec refused it: report, never stop the job
            log.error(json.dumps({"event": "request_not_sent", "idempotency_key": msg.key,
                                  "request": msg.kind, "reason": msg.error}))
            continue
        out.send(settings.topics.requests, first["subscription"], msg.value,
                 {"idempotency_key": msg.key, "request": msg.kind})
        log.info(json.dumps({"event": f"{msg.kind.lower()}_request",
                             **{k: first.get(k) for k in _LOGGED if first.get(k) is not None},
                             **({"files": {str(r["fnr"]): len(r["isns"]) for r in msg.rows}}
                                if msg.kind == "INST" else {})}))
    for alert in alerts:
        if isinstance(alert.get("details"), str):  # a JSON string column in Delta
            alert = {**alert, "details": json.loads(alert["details"])}
        body = json.dumps(alert, sort_keys=True, default=str).encode()
        out.send(settings.topics.alerts, alert["idempotency_key"], body,
                 {"idempotency_key": alert["idempotency_key"], "kind": alert["kind"]})
        log.warning(json.dumps({"event": "alert", **alert}, default=str))
    out.flush()


BatchCallback = Callable[[int, dict[str, int], float], None]
LatencyCallback = Callable[[int, list[tuple[int | None, ...]]], None]


def batch_writer(settings: Settings, app_id: str, on_batch: BatchCallback | None = None,
                 on_latency: LatencyCallback | None = None,
                 ) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function (its producer connects now: see ``KafkaOut.connect``)."""
    out = KafkaOut(settings)
    out.connect()
    ledgers: dict[int, CommitLedger] = {}  # one per Spark session (a restart makes a new one)
    # Open gaps per key as of the key's latest call: a key is only called with data or when
    # its timer fires, and its gaps change only then, so the sum is the job's open gaps.
    open_gaps: dict[tuple[str, str], int] = {}
    direct = writer_mode(settings) == "direct"  # the state tasks write the bulk tables

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        # foreachBatch re-runs the whole plan (including the state function) per action.
        started = time.monotonic()
        clock = _PhaseClock(started)
        session = batch.sparkSession
        # The direct writer's tasks name their files and rows by it (datafiles.py).
        session.sparkContext.setLocalProperty(BATCH_PROPERTY, str(batch_id))
        batch = batch.persist()
        try:
            rows, stats, files = _count_tables(batch)
            # with the direct writer the bulk tables' JSON rows are mirrors for later stages
            counts = {t: n for t, n in rows.items() if not (direct and t in DIRECT_TABLES)}
            counts["bytes"] = sum(int(row["bytes"]) for row in stats)
            open_gaps.update({(row["destination"], row["subscription"]): int(row["open_gaps"])
                              for row in stats})
            counts["open_gaps"] = sum(open_gaps.values())
            clock.lap("t_state_ms")  # Kafka read, decode and the state function run here
            if id(session) not in ledgers:
                ledgers[id(session)] = CommitLedger(session, app_id)
            counts.update(_land_tables(settings, batch, batch_id, app_id, counts, files,
                                       ledgers[id(session)]))
            clock.lap("t_delta_ms")
            # Typed tables: one call after the raw tables, only with conf layouts, and only when
            # the batch holds what they are made of (records, or GFFT layouts). A batch without
            # them is the common idle case (transformWithState runs one at every trigger) and
            # the typed step's jobs would cost it about a second.
            if settings.layouts:
                from pipeline.spark.typed.stage import ensure_typed_tables, write_typed_tables

                if rows.get("records") or rows.get("layouts"):
                    counts.update(write_typed_tables(session, batch, batch_id, settings, app_id))
                else:
                    ensure_typed_tables(session, settings)
                clock.lap("t_typed_ms")
            if rows.get("status_events"):  # utility/lifecycle events, after typed
                from pipeline.spark.typed.lifecycle import apply_lifecycle

                counts.update(apply_lifecycle(batch.sparkSession, batch, batch_id, settings,
                                              app_id))
            requests = _collect(batch, "requests") if counts.get("requests") else []
            alerts = _collect(batch, "alerts") if counts.get("alerts") else []
            if requests or alerts:
                send_requests_and_alerts(settings, out, requests, alerts)
            clock.lap("t_kafka_ms")
            if on_latency is not None and counts.get("transactions"):
                on_latency(batch_id, latency_times(stats))
            clock.lap("t_latency_ms")
            if on_batch is not None:
                on_batch(batch_id, {**counts, **clock.laps}, time.monotonic() - started)
        finally:
            batch.unpersist()

    return write_batch


class _PhaseClock:
    """Milliseconds per phase of one batch (metrics JSONL ``counts.t_*_ms``): where time goes."""

    def __init__(self, started: float) -> None:
        self._last = started
        self.laps: dict[str, int] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = int((now - self._last) * 1000)
        self._last = now


def latency_times(stats: list[dict[str, Any]]) -> list[tuple[int | None, ...]]:
    """The landed transactions' time stamps (Unix µs: commit, processed, sent, landed), from
    the state calls' metrics rows, for ``pipeline.ops.metrics.latency_breakdown_us``."""
    return [(c, p, s, row["landed_us"]) for row in stats for c, p, s in row.get("times_us", [])]


def _land_tables(settings: Settings, batch: DataFrame, batch_id: int, app_id: str,
                 counts: dict[str, int], files: list[dict[str, Any]],
                 ledger: CommitLedger) -> dict[str, int]:
    """Every table's rows of the batch into Delta, exactly once; rows landed per direct table.

    The tables are independent Delta logs: they commit concurrently, which hides most of the
    per-commit latency. The direct writer's files (``files``; none when Spark appends every
    table) are committed by the driver; the other tables' JSON rows are appended by Spark
    (each its own Spark job).
    """
    session = batch.sparkSession
    by_table: dict[str, list[dict[str, Any]]] = {}
    for file in files:
        by_table.setdefault(file["table"], []).append(file)
    committer = DeltaCommitter(session)
    with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
        futures = [pool.submit(committer.commit, table_path(settings, table), found,
                               f"{app_id}-{table}", batch_id, ledger)
                   for table, found in by_table.items()]
        futures += [pool.submit(_in_batch, session, batch_id, _write_delta,
                                table_frame(batch, table, batch_id), table_path(settings, table),
                                f"{app_id}-{table}", batch_id, ledger)
                    for table in TABLES if counts.get(table)]
        for future in futures:
            future.result()
    return {table: sum(int(f["rows"]) for f in found) for table, found in by_table.items()}


def _in_batch(session: Any, batch_id: int, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` in a writer thread with the batch's local property: should Spark recompute
    a lost partition of the persisted batch there, its state tasks need it too."""
    session.sparkContext.setLocalProperty(BATCH_PROPERTY, str(batch_id))
    fn(*args)


def _count_tables(batch: DataFrame
                  ) -> tuple[dict[str, int], list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per table, the state calls' metrics rows (``STATS_TABLE``) and the direct
    writer's file descriptions (``FILES_TABLE``), in one job."""
    from pyspark.sql import functions as F

    small = F.col("table").isin(STATS_TABLE, FILES_TABLE)
    rows = (batch.groupBy("table")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.collect_list(F.when(small, F.col("json"))).alias("small"))
            .collect())
    counts = {r["table"]: int(r["count"]) for r in rows
              if r["table"] not in (STATS_TABLE, FILES_TABLE)}
    found = {r["table"]: [json.loads(j) for j in r["small"]] for r in rows
             if r["table"] in (STATS_TABLE, FILES_TABLE)}
    return counts, found.get(STATS_TABLE, []), found.get(FILES_TABLE, [])


def _collect(batch: DataFrame, table: str) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = batch.where(F.col("table") == table).select("json").collect()
    return [json.loads(r["json"]) for r in rows]
