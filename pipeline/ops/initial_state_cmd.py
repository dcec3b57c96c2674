"""``urbpipe initial-state``: INST requests and where each one stands, from the job's tables.

The job lands each INST request it sends as a ``requests`` row (kind INST: initial-state name,
dbid, fnr, ISN list) and each step of its life as an alert ``initial_state_<state>`` whose
details name the request (``request_id``): requested → started (INST/INIT) → completed
(INST/CMPL) or failed (INST/ERRO, or CMPL with a response code); overdue when no CMPL/ERRO
came within ``stream.initial_state.reply_timeout_ms`` (a late reply still settles it).
Requests sent by hand (``urbpipe request inst``) show up from their first reply on, with
request ids ``ext:<token>:<URBSTIME>``. A request is a problem while overdue or when it failed.

Why alerts and not a table of its own: the alerts already carry every transition with its time
and reason, exactly once per batch, and operators watch them; one more table would say the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

from pipeline.ops.lake import Lake

KIND_PREFIX = "initial_state_"
PROBLEM_STATES = frozenset({"overdue", "failed"})
_RANK = {"requested": 0, "started": 1, "overdue": 2, "completed": 3, "failed": 3}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REQUEST_COLUMNS = ("subscription", "destination", "kind", "request_id", "initial_state",
                    "dbid", "fnr", "isns", "token", "requested_at")
_ALERT_COLUMNS = ("kind", "subscription", "destination", "at", "at_ms", "details")


@dataclass(frozen=True)
class InstRequest:
    """One INST request's latest state."""

    destination: str
    subscription: str
    request_id: str
    initial_state: str
    dbid: int
    fnr: int
    isn_count: int
    token: str
    state: str
    reason: str
    requested_at: datetime | None
    updated_at: datetime | None

    @property
    def ref(self) -> str:
        """DEST/SUBSCRIPTION/REQUEST_ID: the job's request ids count per key."""
        return f"{self.destination}/{self.subscription}/{self.request_id}"

    @property
    def is_problem(self) -> bool:
        return self.state in PROBLEM_STATES

    def as_dict(self) -> dict[str, Any]:
        out = {k: (v.isoformat() if isinstance(v, datetime) else v)
               for k, v in self.__dict__.items()}
        return {"ref": self.ref, **out, "problem": self.is_problem}


def current_requests(requests: list[dict[str, Any]],
                     alerts: list[dict[str, Any]]) -> list[InstRequest]:
    """The latest transition per request (by alert time, then transition order), oldest first.

    ``requests`` are rows of the ``requests`` table (other kinds are ignored), ``alerts`` rows
    of ``alerts`` with kind ``initial_state_*`` (``details`` as JSON text or a dict).
    """
    sent = {_ref(r): r for r in requests if r.get("kind") == "INST"}
    latest: dict[str, tuple[tuple, dict[str, Any], dict[str, Any]]] = {}
    for alert in alerts:
        details = _details(alert)
        if not details.get("request_id"):
            continue
        state = details.get("state") or str(alert["kind"])[len(KIND_PREFIX):]
        ref = _ref({**alert, "request_id": details["request_id"]})
        order = (alert.get("at_ms") or 0, _RANK.get(state, 0))
        if ref not in latest or order >= latest[ref][0]:
            latest[ref] = (order, {**details, "state": state}, alert)
    out = [_request(ref, sent.get(ref), *latest.get(ref, ((), {}, {}))[1:])
           for ref in dict.fromkeys([*sent, *latest])]
    return sorted(out, key=lambda r: (r.requested_at or _EPOCH, r.ref))


def _ref(row: dict[str, Any]) -> str:
    return f"{row.get('destination') or ''}/{row.get('subscription') or ''}/{row['request_id']}"


def _details(alert: dict[str, Any]) -> dict[str, Any]:
    details = alert.get("details")
    if isinstance(details, str):
        try:
            details = json.loads(details)
        except ValueError:
            return {}
    return details if isinstance(details, dict) else {}


def _request(ref: str, sent: dict[str, Any] | None, details: dict[str, Any],
             alert: dict[str, Any]) -> InstRequest:
    """Merge the request row (what was asked) with its latest transition (where it stands)."""
    base = sent or {}
    dest, sub, request_id = ref.split("/", 2)
    requested_ms = details.get("requested_at_ms")
    requested = base.get("requested_at") or (
        datetime.fromtimestamp(requested_ms / 1000, UTC) if requested_ms else None)
    isns = base.get("isns")
    return InstRequest(
        destination=dest, subscription=sub, request_id=request_id,
        initial_state=base.get("initial_state") or details.get("initial_state") or "",
        dbid=int(base.get("dbid") or details.get("dbid") or 0),
        fnr=int(base.get("fnr") or details.get("fnr") or 0),
        isn_count=len(isns) if isns is not None else int(details.get("isn_count") or 0),
        token=base.get("token") or details.get("token") or "",
        state=details.get("state") or "requested", reason=details.get("reason") or "",
        requested_at=requested, updated_at=alert.get("at") or requested)


def load_requests(lake: Lake, since: datetime | None = None) -> list[InstRequest]:
    """Every INST request the tables know of (updated since ``since``, when given).

    A ``requests`` table from before INST requests (no ``kind`` column) holds none.
    """
    if "kind" in lake.columns("requests"):
        requests = lake.read("requests", list(_REQUEST_COLUMNS))
        requests = requests.filter(pc.equal(requests["kind"], "INST")).to_pylist()
    else:
        requests = []
    alerts = lake.read("alerts", list(_ALERT_COLUMNS))
    alerts = alerts.filter(pc.starts_with(alerts["kind"], KIND_PREFIX)).to_pylist()
    found = current_requests(requests, alerts)
    if since is None:
        return found
    return [r for r in found if (r.updated_at or r.requested_at or _EPOCH) >= since]


def format_requests(found: list[InstRequest]) -> str:
    if not found:
        return "no initial-state requests"
    lines = [f"{'REQUEST':<28} {'DEFINITION':<10} {'FILE':<12} {'ISNS':>5}  {'STATE':<10} "
             "REQUESTED / UPDATED"]
    for r in found:
        when = " / ".join(t.strftime("%Y-%m-%d %H:%M:%S") if t else "?"
                          for t in (r.requested_at, r.updated_at))
        lines.append(f"{r.ref:<28} {r.initial_state:<10} {f'{r.dbid}/{r.fnr}':<12} "
                     f"{r.isn_count:>5}  {r.state:<10} {when}")
        if r.reason and r.state != "completed":
            lines.append(f"{'':<28} reason: {r.reason}")
    return "\n".join(lines)
