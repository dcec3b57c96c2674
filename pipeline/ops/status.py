"""``urbpipe status``: where each (destination, subscription) stands, without starting Spark.

Sources, each read the cheapest way that is still the truth, and bounded (never a whole data
table):
- the newest landed transaction and status event per key: a few files of the Delta tables,
  chosen by the statistics in their log (``newest.py``); gaps: the ``gaps`` table (one row
  per transition, small);
- what the job has consumed: the newest completed batch in the query checkpoint (checkpoint.py),
  against the topics' end offsets from the broker (kafka_offsets.py) → lag in messages, and
  the broker's time stamp of the oldest message not processed yet → lag in seconds;
- whether the key is idle and the state size: the newest lines of the metrics file the job's
  listener writes (``stream.metrics_file``; metrics.py).

Each key is one of: **up to date** (nothing waiting on its topic), **idle** (nothing waiting,
and the replicator's STAT answer said it sent nothing since the key's last data), **behind by
N messages / S seconds** (S: how long the oldest waiting message has waited), or lag unknown
(no broker, no checkpoint). Freshness — now minus the newest landed commit time — is shown
beside it, never as lag: an idle subscription's freshness grows while nothing is late.
Kafka lag is per topic (a topic carries one destination, shared by its subscriptions), so
every subscription of a destination shows its destination's lag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

from pipeline.config import Settings
from pipeline.errors import BrokerUnreachable
from pipeline.objectstore import access, is_object_store
from pipeline.ops.checkpoint import processed_offsets
from pipeline.ops.gaps_cmd import Gap, load_gaps
from pipeline.ops.lake import Lake
from pipeline.ops.metrics import read_last_record, read_recent_records
from pipeline.ops.newest import Files, file_stats, newest_by_time, newest_in_sequence
from pipeline.ops.topic_check import (
    KafkaOutOfReach,
    cluster_partitions,
    problem,
    source_partitions,
)
from pipeline.urb.codes import describe_status, describe_subcode

_TX_COLUMNS = ["destination", "subscription", "epoch", "tsnr", "commit_time", "landed_at"]
_STATUS_COLUMNS = ["destination", "subscription", "rt", "st", "rsp", "subc", "token", "tsnr",
                   "time", "received_at"]
#: status_events files looked at per key, newest first (a key whose last status is older
#: shows none: ``urbpipe status`` stays bounded however old the lake)
STATUS_FILES = 64
#: (topic, partition) → offset of the oldest message not processed → its Kafka time stamp (ms)
MessageTimes = Callable[[dict[tuple[str, int], int]], dict[tuple[str, int], int]]

UP_TO_DATE, IDLE, BEHIND, UNKNOWN = "up to date", "idle", "behind", "unknown"


@dataclass
class PartitionLag:
    topic: str
    destination: str
    partition: int
    end_offset: int | None
    processed_offset: int | None

    @property
    def lag(self) -> int | None:
        if self.end_offset is None or self.processed_offset is None:
            return None
        return max(0, self.end_offset - self.processed_offset)


@dataclass
class KeyStatus:
    """One (destination, subscription)."""

    destination: str
    subscription: str
    epoch: int | None = None
    last_tsnr: int | None = None
    last_commit_time: datetime | None = None
    last_landed_at: datetime | None = None
    freshness_seconds: float | None = None
    state: str = UNKNOWN
    lag_messages: int | None = None
    lag_seconds: float | None = None
    idle: bool | None = None  # the job's newest word on it (metrics file), None: unknown
    gaps: list[dict[str, Any]] = field(default_factory=list)
    last_status: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.state == BEHIND:
            waited = "?" if self.lag_seconds is None else f"{self.lag_seconds:.0f}"
            return f"behind by {self.lag_messages} messages / {waited} seconds"
        if self.state == IDLE:
            return "idle (the replicator's STAT answer: nothing sent since)"
        return self.state if self.state == UP_TO_DATE else "lag unknown"


@dataclass
class StatusReport:
    keys: list[KeyStatus]
    partitions: list[PartitionLag]
    checkpoint_batch: int | None
    state: dict[str, Any] | None
    problems: int
    broker_error: str | None = None
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    # partitions per source topic, and the refusal the job starts with when one has several
    topic_partitions: dict[str, int | None] = field(default_factory=dict)
    topic_problem: str | None = None

    @property
    def scrambling_topics(self) -> list[str]:
        """Source topics with several partitions: each is one problem."""
        return [t for t, n in self.topic_partitions.items() if n is not None and n > 1]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for p, lag in zip(out["partitions"], self.partitions, strict=True):
            p["lag"] = lag.lag
        return _jsonable(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def newest_landed(lake: Lake, keys: list[tuple[str, str]]) -> dict[tuple[str, str],
                                                                 dict[str, Any]]:
    """Per key, its newest transaction in the sequence (greatest epoch, then tsnr; the
    initial-state pseudo-transactions, tsnr 0, are outside it), from a few files."""
    table = lake.table("transactions")
    if table is None:
        return {}
    files = Files(table, _TX_COLUMNS, pc.field("tsnr") > 0)
    return newest_in_sequence(file_stats(table), files, keys)


def last_status_events(lake: Lake, keys: list[tuple[str, str]]
                       ) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest URBS per key and per destination (subscription '': destination-wide,
    STRT/REST …), each in the newest of at most ``STATUS_FILES`` files."""
    table = lake.table("status_events")
    if table is None:
        return {}
    wide = sorted({(d, "") for d, _ in keys})
    found = newest_by_time(file_stats(table), Files(table, _STATUS_COLUMNS), [*keys, *wide],
                           "received_at", STATUS_FILES)
    return {k: _describe_status(v) for k, v in found.items()}


def job_view_of_keys(metrics_path: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Per key, what the job's newest batch that called it said (the metrics file's recent
    records: idle, gaps, storm breaker)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_recent_records(metrics_path):
        for key in record.get("keys") or ():
            out[(key["destination"], key["subscription"])] = key
    return out


def _describe_status(row: dict[str, Any]) -> dict[str, Any]:
    rt, st = (row.get("rt") or "").strip(), (row.get("st") or "").strip()
    rsp, subc = int(row.get("rsp") or 0), int(row.get("subc") or 0)
    return {"rt": rt, "st": st, "rsp": rsp, "subc": subc, "token": row.get("token"),
            "tsnr": row.get("tsnr"), "time": row.get("time"),
            "received_at": row.get("received_at"),
            "meaning": describe_status(rt, st), "error": describe_subcode(rsp, subc) or None}


def source_end_offsets(settings: Settings, timeout: float) -> dict[str, dict[int, int]]:
    """End offsets of every topic the job reads (the partitions of each, for the ordering
    check too); with ``topics.output_pattern`` the topics it matches now."""
    from pipeline.ops.kafka_offsets import end_offsets

    topics = settings.source_topics()
    if settings.topics.output_pattern:
        try:
            topics = list(source_partitions(settings, cluster_partitions(settings, timeout)))
        except KafkaOutOfReach as exc:
            raise BrokerUnreachable(str(exc)) from None
    return end_offsets(settings, topics, timeout=timeout)


def partition_lags(settings: Settings, end: dict[str, dict[int, int]] | None,
                   processed: dict[str, dict[int, int]]) -> list[PartitionLag]:
    topics = list(dict.fromkeys([*settings.source_topics(), *(end or {}), *processed]))
    out = []
    for topic in topics:
        parts = sorted(set((end or {}).get(topic, {})) | set(processed.get(topic, {})))
        for p in parts:
            out.append(PartitionLag(topic, settings.destination_of(topic), p,
                                    (end or {}).get(topic, {}).get(p),
                                    processed.get(topic, {}).get(p)))
    return out


def destination_lag(parts: list[PartitionLag]) -> dict[str, int | None]:
    """Messages waiting per destination; None when any of its partitions is unknown."""
    out: dict[str, int | None] = {}
    for p in parts:
        have = out.get(p.destination, 0)
        out[p.destination] = None if have is None or p.lag is None else have + p.lag
    return out


def destination_waited(parts: list[PartitionLag], times: MessageTimes | None,
                       now: datetime) -> dict[str, float]:
    """Per destination, how long its oldest waiting message has waited (seconds since its
    Kafka time stamp): one message read per partition that has a lag."""
    waiting = {(p.topic, p.partition): p.processed_offset for p in parts
               if p.lag and p.processed_offset is not None}
    if not waiting or times is None:
        return {}
    stamps = times(waiting)  # type: ignore[arg-type]
    out: dict[str, float] = {}
    for p in parts:
        ms = stamps.get((p.topic, p.partition))
        if ms is not None:
            waited = max(0.0, now.timestamp() - ms / 1000)
            out[p.destination] = max(out.get(p.destination, 0.0), waited)
    return out


def build_report(settings: Settings, lake: Lake, *, end_offsets: dict | None,
                 metrics_path: str, broker_error: str | None = None,
                 now: datetime | None = None,
                 message_times: MessageTimes | None = None) -> StatusReport:
    """Everything ``status`` shows; ``end_offsets`` None means the broker was not asked;
    ``message_times`` reads the Kafka time stamps of the oldest waiting messages."""
    now = now or datetime.now(UTC)
    lake.require()
    gaps = load_gaps(lake)
    checkpoint_dir = settings.location(settings.stream.checkpoint_dir)
    checkpoint = processed_offsets(checkpoint_dir, access(settings)
                                   if is_object_store(checkpoint_dir) else None)
    parts = partition_lags(settings, end_offsets, checkpoint.offsets if checkpoint else {})
    seen = job_view_of_keys(metrics_path)
    configured = {(d, s.name) for s in settings.subscriptions for d in s.destinations}
    called = {k for k in seen if k[1]}  # a destination-wide key only shows with its gaps
    keys = sorted(configured | called | {(g.row["destination"], g.row["subscription"])
                                         for g in gaps})
    landed = newest_landed(lake, keys)
    statuses = last_status_events(lake, keys)
    lag, waited = destination_lag(parts), destination_waited(parts, message_times, now)
    out = []
    for key in keys:
        ks = _key_status(key, landed.get(key), gaps, statuses, now)
        _place(ks, lag.get(key[0]), waited.get(key[0]), seen.get(key))
        out.append(ks)
    counts = source_partitions(settings, {t: len(p) for t, p in (end_offsets or {}).items()
                                          if p}) if end_offsets is not None else {}
    topic_problem = problem(counts)
    scrambling = sum(1 for n in counts.values() if n is not None and n > 1)
    return StatusReport(out, parts, checkpoint.batch_id if checkpoint else None,
                        _state(read_last_record(metrics_path)),
                        sum(1 for g in gaps if g.is_problem) + scrambling,
                        broker_error, now, counts, topic_problem)


def _key_status(key: tuple[str, str], landed: dict[str, Any] | None, gaps: list[Gap],
                statuses: dict, now: datetime) -> KeyStatus:
    ks = KeyStatus(*key)
    if landed:
        ks.epoch, ks.last_tsnr = landed["epoch"], landed["tsnr"]
        ks.last_commit_time, ks.last_landed_at = landed["commit_time"], landed["landed_at"]
    if ks.last_commit_time:
        ks.freshness_seconds = round((now - ks.last_commit_time).total_seconds(), 3)
    ks.gaps = [{"ref": g.ref, "from_tsnr": g.row["from_tsnr"], "to_tsnr": g.row["to_tsnr"],
                "state": g.state, "acknowledged": g.ack is not None}
               for g in gaps if (g.row["destination"], g.row["subscription"]) == key
               and g.is_problem]
    ks.last_status = statuses.get(key) or statuses.get((key[0], ""))
    return ks


def _place(ks: KeyStatus, lag: int | None, waited: float | None,
           seen: dict[str, Any] | None) -> None:
    """Up to date, idle or behind, from the destination's lag and the job's word."""
    ks.lag_messages = lag
    ks.idle = None if seen is None else bool(seen.get("idle"))
    if lag is None:
        ks.state = UNKNOWN
    elif lag > 0:
        ks.state, ks.lag_seconds = BEHIND, waited
    else:
        ks.state, ks.lag_seconds = (IDLE if ks.idle else UP_TO_DATE), 0.0


def _state(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if not record:
        return None
    return {k: record.get(k) for k in ("batch_id", "state_rows", "state_memory_bytes",
                                       "timestamp", "duration_ms")}


def _fmt_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def format_report(report: StatusReport) -> str:
    """The human-readable form: one block per key, then Kafka and state lines."""
    lines = []
    for k in report.keys:
        epoch = "-" if k.epoch is None else k.epoch
        tsnr = "-" if k.last_tsnr is None else k.last_tsnr
        lines.append(f"{k.destination}/{k.subscription}: {k.describe()}; epoch {epoch} tsnr "
                     f"{tsnr}, committed {_fmt_time(k.last_commit_time)} "
                     f"({_age(k.freshness_seconds)} ago), landed "
                     f"{_fmt_time(k.last_landed_at)}")
        for g in k.gaps:
            ack = " (acknowledged)" if g["acknowledged"] else ""
            lines.append(f"    gap {g['ref']} tsnr {g['from_tsnr']}-{g['to_tsnr']}: "
                         f"{g['state']}{ack}")
        if k.last_status:
            s = k.last_status
            err = f" — {s['rsp']}/{s['subc']} {s['error']}" if s["error"] else ""
            lines.append(f"    last status {s['rt'] or '-'}/{s['st']} at "
                         f"{_fmt_time(s['time'] or s['received_at'])}: {s['meaning']}{err}")
    if report.partitions:
        lines.append("kafka (end − processed"
                     + (f", checkpoint batch {report.checkpoint_batch})"
                        if report.checkpoint_batch is not None else ", no completed batch)"))
        for p in report.partitions:
            lag = "?" if p.lag is None else str(p.lag)
            lines.append(f"    {p.topic}[{p.partition}] ({p.destination}): end "
                         f"{'?' if p.end_offset is None else p.end_offset} processed "
                         f"{'?' if p.processed_offset is None else p.processed_offset} lag {lag}")
    if report.topic_partitions:
        lines.append("topics: " + ", ".join(
            f"{t} {'missing' if n is None else f'{n} partition' + ('s' if n != 1 else '')}"
            for t, n in report.topic_partitions.items()))
    if report.topic_problem:
        lines.append(f"    PROBLEM: {report.topic_problem}")
    if report.broker_error:
        lines.append(f"kafka: {report.broker_error}")
    if report.state:
        st = report.state
        lines.append(f"state: {st.get('state_rows')} rows, "
                     f"{(st.get('state_memory_bytes') or 0) / 1e6:.1f} MB "
                     f"(batch {st.get('batch_id')})")
    else:
        lines.append("state: unknown (no metrics file)")
    topics = len(report.scrambling_topics)
    several = f", {topics} topic(s) with several partitions" if topics else ""
    lines.append(f"problems: {report.problems} ({report.problems - topics} gap(s) open or "
                 f"unacknowledged{several})" if report.problems else "problems: none")
    return "\n".join(lines)

