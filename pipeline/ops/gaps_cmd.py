"""``urbpipe gaps``: the current state of every gap, and operator acknowledgements.

The job appends one ``gaps`` row per transition, so a gap's current state is its latest row
(by ``updated_at``, then batch, then transition order). An operator acknowledges a gap (usually
an unrecoverable one, after deciding what to do about the lost transactions) with
``gaps ack``; acknowledgements live in the ops-owned Delta table ``gap_acks`` next to the
job's tables, so they are as durable and queryable as the data they talk about. A gap is a
*problem* while it is open or requested, or unrecoverable and not acknowledged.

The job's ``gap_id`` (``<epoch>:<first tsnr>``) is unique only within one (destination,
subscription), so operators name a gap ``DEST/SUBSCRIPTION/GAP_ID`` (shown by ``gaps list``);
the bare job id is accepted when it is unambiguous.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipeline.errors import UsageError
from pipeline.ops.lake import Lake

ACKS_TABLE = "gap_acks"
ACKS_SCHEMA = pa.schema([
    pa.field("destination", pa.string()), pa.field("subscription", pa.string()),
    pa.field("gap_id", pa.string()), pa.field("acked_by", pa.string()),
    pa.field("note", pa.string()), pa.field("acked_at", pa.timestamp("us", tz="UTC"))])
OPEN_STATES = frozenset({"open", "requested"})
LOST_STATES = frozenset({"unrecoverable", "lost"})
_TRANSITION_ORDER = {"open": 0, "requested": 1, "filled": 2, "unrecoverable": 2, "lost": 2,
                     "filled_late": 3}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GAP_COLUMNS = ("subscription", "destination", "epoch", "gap_id", "from_tsnr", "to_tsnr",
                "state", "requests_sent", "missing_count", "opened_at", "updated_at",
                "closed_at", "reason", "batch_id", "kind")


@dataclass(frozen=True)
class Ack:
    by: str
    note: str | None
    at: datetime


@dataclass(frozen=True)
class Gap:
    """A gap's latest transition, with its acknowledgement if there is one."""

    row: dict[str, Any]
    ack: Ack | None

    @property
    def gap_id(self) -> str:
        return str(self.row["gap_id"])

    @property
    def ref(self) -> str:
        """The operator-facing id: DEST/SUBSCRIPTION/GAP_ID."""
        return gap_ref(self.row)

    @property
    def state(self) -> str:
        return str(self.row["state"])

    @property
    def is_problem(self) -> bool:
        """Open, or something lost and not acknowledged: an unrecoverable gap, messages that
        never arrived (kind messages), a gap whose late fills left some tsnrs lost."""
        if self.state in OPEN_STATES:
            return True
        lost = self.state in LOST_STATES or (
            self.state == "filled_late" and (self.row.get("missing_count") or 0) > 0)
        return lost and self.ack is None

    def as_dict(self) -> dict[str, Any]:
        out = {"ref": self.ref, **{k: _plain(v) for k, v in self.row.items()}}
        out["acknowledged_by"] = self.ack.by if self.ack else None
        out["acknowledged_at"] = _plain(self.ack.at) if self.ack else None
        out["ack_note"] = self.ack.note if self.ack else None
        out["problem"] = self.is_problem
        return out


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def gap_ref(row: dict[str, Any]) -> str:
    return f"{row.get('destination') or ''}/{row.get('subscription') or ''}/{row['gap_id']}"


def current_gaps(rows: list[dict[str, Any]], acks: list[dict[str, Any]]) -> list[Gap]:
    """Latest transition per gap_id, oldest gap first; the newest ack per gap attached."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = (row.get("updated_at") or _EPOCH, row.get("batch_id") or 0,
               _TRANSITION_ORDER.get(row.get("state") or "", 0))
        ref = gap_ref(row)
        have = latest.get(ref)
        if have is None or key >= have["_key"]:
            latest[ref] = {**row, "_key": key}
    newest_ack: dict[str, Ack] = {}
    for a in sorted(acks, key=lambda a: a["acked_at"] or _EPOCH):
        newest_ack[gap_ref(a)] = Ack(a["acked_by"], a.get("note"), a["acked_at"])
    gaps = [Gap({k: v for k, v in r.items() if k != "_key"}, newest_ack.get(ref))
            for ref, r in latest.items()]
    return sorted(gaps, key=lambda g: (g.row.get("opened_at") or _EPOCH, g.ref))


def find_gap(gaps: list[Gap], name: str) -> Gap:
    """The gap an operator named, by full ref or by an unambiguous bare job gap_id."""
    matches = [g for g in gaps if name in (g.ref, g.gap_id)]
    if not matches:
        raise UsageError(f"no gap {name!r} (see: urbpipe gaps list --all)")
    if len(matches) > 1:
        refs = ", ".join(g.ref for g in matches)
        raise UsageError(f"gap id {name!r} is ambiguous, name one of: {refs}")
    return matches[0]


def load_gaps(lake: Lake) -> list[Gap]:
    have = set(lake.columns("gaps"))  # a gaps table from before message-number gaps has no kind
    rows = lake.read("gaps", [c for c in _GAP_COLUMNS if c in have]).to_pylist()
    acks = lake.read(ACKS_TABLE, schema=ACKS_SCHEMA).to_pylist()
    return current_gaps(rows, acks)


def acknowledge(lake: Lake, gap_id: str, by: str, note: str | None,
                now: datetime | None = None) -> Gap:
    """Record an acknowledgement; the gap must exist (a typo must not be silently recorded)."""
    if not by.strip():
        raise UsageError("--by must name who acknowledges")
    gap = find_gap(load_gaps(lake), gap_id)
    at = now or datetime.now(UTC)
    row = {"destination": gap.row.get("destination"), "subscription": gap.row.get("subscription"),
           "gap_id": gap.gap_id, "acked_by": by, "note": note, "acked_at": at}
    lake.append(ACKS_TABLE, pa.Table.from_pylist([row], schema=ACKS_SCHEMA))
    return Gap(gap.row, Ack(by, note, at))


def format_gaps(gaps: list[Gap]) -> str:
    if not gaps:
        return "no gaps"
    lines = [f"{'GAP':<32} {'TSNRS':<23} {'STATE':<13} {'REQS':>4}  OPENED / ACK"]
    for g in gaps:
        r = g.row
        what = "msnr " if r.get("kind") == "messages" else ""
        tsnrs = f"{what}{r['from_tsnr']}-{r['to_tsnr']}"
        opened = r["opened_at"].strftime("%Y-%m-%d %H:%M:%S") if r.get("opened_at") else "?"
        ack = f"  acked by {g.ack.by}" + (f": {g.ack.note}" if g.ack.note else "") if g.ack else ""
        lines.append(f"{g.ref:<32} {tsnrs:<23} {g.state:<13} {r['requests_sent'] or 0:>4}  "
                     f"{opened}{ack}")
        if r.get("reason"):
            lines.append(f"{'':<32} reason: {r['reason']}")
    return "\n".join(lines)


def resume_command(key: str, by: str, note: str | None) -> tuple[tuple[str, str], bytes]:
    """The control record that resumes requests for a key whose storm breaker tripped:
    (destination, subscription) and the JSON command the job's decode stage routes to it.

    The breaker lives in the job's state, so the command travels the way the job's input
    does — through Kafka (``topics.control``) — and is applied in stream order, exactly once
    per key state, whatever batch reads it.
    """
    destination, _, subscription = key.partition("/")
    if not destination or not subscription or "/" in subscription:
        raise UsageError(f"name the key as DEST/SUBSCRIPTION, got {key!r}")
    if not by.strip():
        raise UsageError("--by must name who resumes")
    doc = {"command": "resume", "destination": destination, "subscription": subscription,
           "by": by, "note": note or "", "at": datetime.now(UTC).isoformat()}
    return (destination, subscription), json.dumps(doc, sort_keys=True).encode()
