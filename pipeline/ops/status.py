"""``urbpipe status``: where each (destination, subscription) stands, without starting Spark.

Sources, each read the cheapest way that is still the truth:
- landed transactions, gaps, status events: the Delta tables (``deltalake``, see lake.py);
- what the job has consumed: the newest completed batch in the query checkpoint (checkpoint.py),
  against the topics' end offsets from the broker (kafka_offsets.py) → lag in messages;
- state size: the newest line of the metrics file the job's listener writes (metrics.py).

Lag in seconds is ``now − newest landed commit time`` (URBTTTIM; URBHTIME when that is not
set): on an idle source it grows although nothing is waiting, so read it together with the lag
in messages. Kafka lag is per topic (a topic carries one destination, shared by its
subscriptions), so every subscription of a destination shows its destination's lag.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config import Settings
from pipeline.errors import BrokerUnreachable
from pipeline.ops.checkpoint import processed_offsets
from pipeline.ops.gaps_cmd import Gap, load_gaps
from pipeline.ops.lake import Lake
from pipeline.ops.metrics import read_last_record
from pipeline.ops.topic_check import (
    KafkaOutOfReach,
    cluster_partitions,
    problem,
    source_partitions,
)
from pipeline.urb.codes import describe_status, describe_subcode

_TX_COLUMNS = ["destination", "subscription", "epoch", "tsnr", "commit_time", "sent_time",
               "landed_at"]
_STATUS_COLUMNS = ["destination", "subscription", "rt", "st", "rsp", "subc", "token", "tsnr",
                   "time", "received_at"]


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
    transactions: int = 0
    last_commit_time: datetime | None = None
    last_sent_time: datetime | None = None
    last_landed_at: datetime | None = None
    lag_seconds: float | None = None
    lag_messages: int | None = None
    gaps: list[dict[str, Any]] = field(default_factory=list)
    last_status: dict[str, Any] | None = None


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


def landed_by_key(transactions: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """Newest epoch, its highest tsnr, newest times and the count, per (dest, subscription).

    Initial-state pseudo-transactions (tsnr 0) count as landed but are outside the sequence.
    """
    if transactions.num_rows == 0:
        return {}
    keys = ["destination", "subscription"]
    times = transactions.group_by(keys).aggregate([
        ("tsnr", "count"), ("commit_time", "max"), ("sent_time", "max"), ("landed_at", "max"),
        ("epoch", "max")]).to_pylist()
    seq = transactions.filter(pc.greater(transactions["tsnr"], 0))
    tsnrs = seq.group_by([*keys, "epoch"]).aggregate([("tsnr", "max")]).to_pylist()
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in times:
        out[(row["destination"], row["subscription"])] = {
            "transactions": row["tsnr_count"], "last_commit_time": row["commit_time_max"],
            "last_sent_time": row["sent_time_max"], "last_landed_at": row["landed_at_max"],
            "epoch": row["epoch_max"], "last_tsnr": None}
    for row in tsnrs:
        entry = out[(row["destination"], row["subscription"])]
        if row["epoch"] == entry["epoch"]:
            entry["last_tsnr"] = row["tsnr_max"]
    return out


def last_status_events(events: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest URBS per (destination, subscription); subscription '' = destination-wide."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in events.to_pylist():
        when = row.get("received_at") or row.get("time")
        key = (row.get("destination") or "", (row.get("subscription") or "").strip())
        have = out.get(key)
        if have is None or (when and (have["_when"] is None or when >= have["_when"])):
            out[key] = {**row, "_when": when}
    return {k: _describe_status(v) for k, v in out.items()}


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


def build_report(settings: Settings, lake: Lake, *, end_offsets: dict | None,
                 metrics_path: str, broker_error: str | None = None,
                 now: datetime | None = None) -> StatusReport:
    """Everything ``status`` shows; ``end_offsets`` None means the broker was not asked."""
    now = now or datetime.now(UTC)
    lake.require()
    landed = landed_by_key(lake.read("transactions", _TX_COLUMNS))
    statuses = last_status_events(lake.read("status_events", _STATUS_COLUMNS))
    gaps = load_gaps(lake)
    checkpoint = processed_offsets(settings.location(settings.stream.checkpoint_dir))
    parts = partition_lags(settings, end_offsets, checkpoint.offsets if checkpoint else {})

    configured = {(d, s.name) for s in settings.subscriptions for d in s.destinations}
    named = {k for k in statuses if k[1]}
    keys = sorted(configured | set(landed) | {(g.row["destination"], g.row["subscription"])
                                             for g in gaps} | named)
    out = [_key_status(k, landed.get(k), gaps, statuses, destination_lag(parts), now)
           for k in keys]
    counts = source_partitions(settings, {t: len(p) for t, p in (end_offsets or {}).items()
                                          if p}) if end_offsets is not None else {}
    topic_problem = problem(counts)
    scrambling = sum(1 for n in counts.values() if n is not None and n > 1)
    return StatusReport(out, parts, checkpoint.batch_id if checkpoint else None,
                        _state(read_last_record(metrics_path)),
                        sum(1 for g in gaps if g.is_problem) + scrambling,
                        broker_error, now, counts, topic_problem)


def _key_status(key: tuple[str, str], landed: dict[str, Any] | None, gaps: list[Gap],
                statuses: dict, dest_lag: dict[str, int | None], now: datetime) -> KeyStatus:
    ks = KeyStatus(*key, **(landed or {}))
    newest = ks.last_commit_time or ks.last_sent_time
    ks.lag_seconds = round((now - newest).total_seconds(), 3) if newest else None
    ks.lag_messages = dest_lag.get(key[0])
    ks.gaps = [{"ref": g.ref, "from_tsnr": g.row["from_tsnr"], "to_tsnr": g.row["to_tsnr"],
                "state": g.state, "acknowledged": g.ack is not None}
               for g in gaps if (g.row["destination"], g.row["subscription"]) == key
               and g.is_problem]
    ks.last_status = statuses.get(key) or statuses.get((key[0], ""))
    return ks


def _state(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if not record:
        return None
    return {k: record.get(k) for k in ("batch_id", "state_rows", "state_memory_bytes",
                                       "timestamp", "duration_ms")}


def _fmt_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def format_report(report: StatusReport) -> str:
    """The human-readable form: one block per key, then Kafka and state lines."""
    lines = []
    for k in report.keys:
        lag_msgs = "?" if k.lag_messages is None else str(k.lag_messages)
        lag_s = "-" if k.lag_seconds is None else f"{k.lag_seconds:.1f} s"
        epoch = "-" if k.epoch is None else k.epoch
        tsnr = "-" if k.last_tsnr is None else k.last_tsnr
        lines.append(f"{k.destination}/{k.subscription}: epoch {epoch} tsnr {tsnr}"
                     f" ({k.transactions} tx, last landed {_fmt_time(k.last_landed_at)})"
                     f"  lag {lag_msgs} msgs / {lag_s}")
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

