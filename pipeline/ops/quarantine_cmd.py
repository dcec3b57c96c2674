"""``urbpipe quarantine``: list quarantined input, and replay it after a codec fix.

The job quarantines a Kafka record it cannot decode with its raw bytes and coordinates
(``source = decode``). After the codec is fixed, ``replay`` re-decodes those bytes with the
current codec and re-produces the ones that now decode to their original topic, with the
original key (the subscription) and headers that mark the replay and name the original
coordinates; the job then processes them like any other message. Records that still fail stay
in quarantine (they are simply not replayed).

Which records were replayed is kept in the ops-owned Delta table ``quarantine_replays``
(keyed by original topic/partition/offset), so a second replay never sends a record twice and
``list`` can show what is still pending. Only ``decode`` rows are replayable: ``decode_warning``
rows belong to messages the job did process, and ``reassembly`` rows (broken counts or
continuity) carry no raw message and need the replicator to resend instead.

A row an operator has reviewed and decided about is acknowledged (``ack``, the ops-owned
table ``quarantine_acks``: who, when, why): it stops counting as pending, so ``list`` (and a
monitor built on its exit code) pages only for new rows; the quarantine row itself is kept for
audit, and ``list --all`` shows it with its acknowledgement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipeline.config import Settings
from pipeline.errors import UsageError
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients
from pipeline.ops.lake import Lake
from pipeline.urb import UrbFormatError, decode_message

REPLAYS_TABLE = "quarantine_replays"
REPLAYS_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()), pa.field("replayed_at", pa.timestamp("us", tz="UTC")),
    pa.field("new_partition", pa.int32()), pa.field("new_offset", pa.int64())])
ACKS_TABLE = "quarantine_acks"
#: What identifies a quarantine row (a Kafka record may have several: a decode warning and a
#: reassembly finding), then who acknowledged it, when and why.
_IDENTITY = ("source", "subscription", "tsnr", "topic", "partition", "offset", "quarantined_at")
ACKS_SCHEMA = pa.schema([
    pa.field("source", pa.string()), pa.field("subscription", pa.string()),
    pa.field("tsnr", pa.int64()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("quarantined_at", pa.timestamp("us", tz="UTC")), pa.field("acked_by", pa.string()),
    pa.field("note", pa.string()), pa.field("acked_at", pa.timestamp("us", tz="UTC"))])
REPLAY_HEADER = "urbpipe-replay"
REPLAY_OF_HEADER = "urbpipe-replay-of"
REPLAYABLE_SOURCE = "decode"
_LIST_COLUMNS = ["source", "destination", "subscription", "tsnr", "reason", "topic",
                 "partition", "offset", "eye", "quarantined_at"]


def _coords(row: dict[str, Any]) -> tuple[str, int, int]:
    return (row["topic"], int(row["partition"]), int(row["offset"]))


def replayed_coordinates(lake: Lake) -> dict[tuple[str, int, int], datetime]:
    rows = lake.read(REPLAYS_TABLE, schema=REPLAYS_SCHEMA).to_pylist()
    return {_coords(r): r["replayed_at"] for r in rows}


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(name) for name in _IDENTITY)


def acknowledgements(lake: Lake) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The newest acknowledgement of each acknowledged quarantine row."""
    rows = sorted(lake.read(ACKS_TABLE, schema=ACKS_SCHEMA).to_pylist(),
                  key=lambda r: r["acked_at"])
    return {_identity(r): r for r in rows}


def ref(row: dict[str, Any]) -> str:
    """How ``list`` names a row's Kafka record and ``ack`` takes it: topic[partition]@offset."""
    return f"{row['topic']}[{row['partition']}]@{row['offset']}"


def list_entries(lake: Lake, *, include_replayed: bool = False,
                 since: datetime | None = None) -> list[dict[str, Any]]:
    """Quarantine rows (without raw bytes), oldest first, each with ``replayed_at`` and its
    acknowledgement (``acked_by``, ``acked_at``, ``ack_note``); pending ones only (neither
    replayed nor acknowledged) unless ``include_replayed``."""
    replayed = replayed_coordinates(lake)
    acked = acknowledgements(lake)
    out = []
    for row in lake.read("quarantine", _LIST_COLUMNS).to_pylist():
        if since and (row["quarantined_at"] is None or row["quarantined_at"] < since):
            continue
        row["replayed_at"] = replayed.get(_coords(row)) if row["topic"] is not None else None
        ack = acked.get(_identity(row)) or {}
        row.update(acked_by=ack.get("acked_by"), acked_at=ack.get("acked_at"),
                   ack_note=ack.get("note"))
        if (row["replayed_at"] is None and row["acked_by"] is None) or include_replayed:
            out.append(row)
    return sorted(out, key=lambda r: (r["quarantined_at"] or datetime.min.replace(tzinfo=UTC),
                                      r["topic"] or "", r["partition"] or 0, r["offset"] or 0))


def format_entries(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "quarantine is empty"
    lines = []
    for r in rows:
        when = r["quarantined_at"].strftime("%Y-%m-%d %H:%M:%S") if r["quarantined_at"] else "?"
        done = "  [replayed]" if r.get("replayed_at") else ""
        if r.get("acked_by"):
            done += f"  [acknowledged by {r['acked_by']}" + (
                f": {r['ack_note']}]" if r.get("ack_note") else "]")
        lines.append(f"{when} {r['source']:<14} {ref(r)} "
                     f"{r['destination'] or ''}/{r['subscription'] or ''}: {r['reason']}{done}")
    return "\n".join(lines)


def acknowledge(lake: Lake, refs: list[str], by: str, note: str | None, *,
                everything: bool = False, since: datetime | None = None,
                source: str | None = None, now: datetime | None = None) -> list[dict[str, Any]]:
    """Acknowledge the pending rows named by ``refs`` (topic[partition]@offset: every row of
    that record), or every pending row (``everything``), within ``since`` and ``source``;
    the rows acknowledged. A ref that names no pending row is a usage error (a typo must not
    be recorded as a review)."""
    if not by.strip():
        raise UsageError("--by must name who acknowledges")
    if bool(refs) == everything:
        raise UsageError("name the rows (topic[partition]@offset as list shows them) or give "
                         "--all, not both")
    pending = [r for r in list_entries(lake, since=since)
               if source is None or r["source"] == source]
    chosen = pending if everything else [r for r in pending if ref(r) in refs]
    unknown = sorted(set(refs) - {ref(r) for r in chosen})
    if unknown:
        raise UsageError(f"no pending quarantine row {', '.join(unknown)} (see: urbpipe "
                         "quarantine list)")
    at = now or datetime.now(UTC)
    if chosen:
        lake.append(ACKS_TABLE, pa.Table.from_pylist(
            [{**{n: r[n] for n in _IDENTITY}, "acked_by": by, "note": note, "acked_at": at}
             for r in chosen], schema=ACKS_SCHEMA))
    return chosen


@dataclass
class ReplayReport:
    """What a replay did (or, in a dry run, would do)."""

    dry_run: bool
    candidates: int = 0
    replayed: int = 0
    still_failing: int = 0
    already_replayed: int = 0
    not_replayable: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        verb = "would replay" if self.dry_run else "replayed"
        return (f"{self.candidates} quarantined message(s) re-decoded: {verb} {self.replayed}, "
                f"still failing {self.still_failing} (kept); {self.already_replayed} replayed "
                f"before, {self.not_replayable} not replayable (reassembly findings or "
                f"decode warnings)")


@dataclass(frozen=True)
class Decoded:
    row: dict[str, Any]
    error: str | None


def redecode(rows: list[dict[str, Any]], codepage: str) -> list[Decoded]:
    """Each row with the current codec's verdict on its raw bytes (None = decodes now)."""
    out = []
    for row in rows:
        try:
            decode_message(row["raw"], codepage=codepage)
            out.append(Decoded(row, None))
        except UrbFormatError as exc:
            out.append(Decoded(row, str(exc)))
    return out


class ReplayProducer:
    """Produces replayed messages and learns where each landed."""

    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        self._settings = settings
        self._timeout = timeout
        self._seen = ClientErrors()
        self._producer = kafka_clients.producer(settings, self._seen, **{
            "enable.idempotence": "true", "message.timeout.ms": str(int(timeout * 1000))})

    def send_all(self, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
        """(row, new partition, new offset) for each row, once the broker acknowledged all."""
        landed: list[tuple[dict[str, Any], int, int]] = []
        errors: list[Any] = []

        def done(row: dict[str, Any]) -> Any:
            def report(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    landed.append((row, msg.partition(), msg.offset()))
            return report

        for row in rows:
            topic, partition, offset = _coords(row)
            key = (row.get("subscription") or "").encode() or None
            headers = [(REPLAY_HEADER, b"1"),
                       (REPLAY_OF_HEADER, f"{topic}/{partition}/{offset}".encode())]
            self._producer.produce(topic, key=key, value=row["raw"], headers=headers,
                                   on_delivery=done(row))
            self._producer.poll(0)
        _left, fatal = kafka_clients.flush(self._producer, self._timeout + 1)
        errors = [*fatal, *errors]
        if errors or len(landed) != len(rows):
            why = str(errors[0]) if errors else "not acknowledged in time"
            raise kafka_clients.failure(
                self._settings, self._producer, self._seen, f"replay: {len(landed)} of "
                f"{len(rows)} delivered to {self._settings.kafka.bootstrap_servers}: {why}",
                *errors)
        return landed


def replay(settings: Settings, lake: Lake, *, since: datetime | None = None,
           dry_run: bool = False, producer: ReplayProducer | None = None,
           now: datetime | None = None) -> ReplayReport:
    """Re-decode quarantined raw messages and re-produce those that decode now."""
    report = ReplayReport(dry_run)
    replayed = replayed_coordinates(lake)
    candidates = []
    for row in lake.read("quarantine").to_pylist():
        if since and (row["quarantined_at"] is None or row["quarantined_at"] < since):
            continue
        if row["source"] != REPLAYABLE_SOURCE or row["raw"] is None or row["topic"] is None:
            report.not_replayable += 1
            continue
        if _coords(row) in replayed:
            report.already_replayed += 1
            continue
        candidates.append(row)
    # one Kafka record may have been quarantined more than once; replay it once
    unique = list({_coords(r): r for r in candidates}.values())
    report.candidates = len(unique)
    verdicts = redecode(unique, settings.replicator.codepage)
    ready = [d.row for d in verdicts if d.error is None]
    report.failures = [{"topic": d.row["topic"], "partition": d.row["partition"],
                        "offset": d.row["offset"], "error": d.error}
                       for d in verdicts if d.error is not None]
    report.still_failing = len(report.failures)
    report.replayed = len(ready)
    if dry_run or not ready:
        return report
    landed = (producer or ReplayProducer(settings)).send_all(ready)
    at = now or datetime.now(UTC)
    lake.append(REPLAYS_TABLE, pa.Table.from_pylist(
        [{"topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
          "replayed_at": at, "new_partition": p, "new_offset": o} for r, p, o in landed],
        schema=REPLAYS_SCHEMA))
    return report
