"""The job's own alerts, posted to Alertmanager's API (``alertmanager.url``) beside the
alerts topic and table: the pager operators already have.

Why a state per alert: Alertmanager knows an alert by its labels and keeps it firing until
its ``endsAt``; posting the same labels with an ``endsAt`` of now resolves it. A gap's
transitions are turned into that: ``gap_open``/``gap_requested`` fire the gap's ``gap_open``
alert, ``gap_filled`` resolves it, ``gap_unrecoverable`` resolves it and fires the gap's
``gap_unrecoverable`` (critical), which a late fill of every lost tsnr (``gap_filled_late``)
or an operator's ``urbpipe gaps ack`` resolves. A tripped storm breaker fires until
``storm_resumed``, an overdue or incomplete initial-state request until it completes. Every
other warning or critical kind is one event: it fires for ``alertmanager.event_hours``.
Info kinds are not paged.

Labels: ``alertname`` (the kind that fires), ``severity``, ``destination``,
``subscription``, the alert's identity (``gap``, ``request``, ``table``, or ``event``) and
``alertmanager.labels`` (``job: urbpipe`` by default, so the example configuration's
inhibition by ``UrbpipeJobDown`` applies). Annotations: ``summary`` (the alert's message),
``runbook_url`` (docs/runbook.md, the kind's section), ``details`` (JSON).

Delivery never fails a batch: an unreachable Alertmanager is logged and the alerts are kept
(at most ``MAX_PENDING``) and posted again with the next ones. A replayed batch posts the same
alerts again, which Alertmanager takes as an update. Engine-free (urllib).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.config import Settings

log = logging.getLogger("urbpipe.alertmanager")

MAX_PENDING = 10_000
#: kind → (alertname it fires, alertnames it resolves), for alerts with a life of their own.
STATEFUL: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "gap_open": ("gap_open", ()),
    "gap_requested": ("gap_open", ()),
    "gap_filled": (None, ("gap_open",)),
    "gap_unrecoverable": ("gap_unrecoverable", ("gap_open",)),
    "messages_missing": ("messages_missing", ()),
    "storm_tripped": ("storm_tripped", ()),
    "storm_resumed": (None, ("storm_tripped",)),
    "initial_state_overdue": ("initial_state_overdue", ()),
    "initial_state_incomplete": ("initial_state_incomplete", ()),
    "initial_state_completed": (None, ("initial_state_overdue", "initial_state_incomplete")),
}
#: Severity of each alertname fired by a state (the others carry their alert's own).
_FIRED_SEVERITY = {"gap_open": "warning", "gap_unrecoverable": "critical",
                   "messages_missing": "warning", "storm_tripped": "critical",
                   "initial_state_overdue": "warning", "initial_state_incomplete": "warning"}

Post = Callable[[str, bytes, float], None]


def _identity(alert: Mapping[str, Any]) -> dict[str, str]:
    """The label naming what the alert is about beyond its key."""
    details = alert.get("details") or {}
    if isinstance(details, str):
        details = json.loads(details)
    if "gap_id" in details:
        return {"gap": str(details["gap_id"])}
    if "request_id" in details:
        return {"request": str(details["request_id"])}
    if "table" in details:
        return {"table": str(details["table"])}
    if alert["kind"] in STATEFUL:  # a key's breaker
        return {}
    return {"event": str(alert["idempotency_key"])}


def _at(alert: Mapping[str, Any]) -> datetime:
    at = alert.get("at")
    if isinstance(at, datetime):
        return at if at.tzinfo else at.replace(tzinfo=UTC)
    if isinstance(at, str):
        return datetime.fromisoformat(at)
    return datetime.fromtimestamp(int(alert["at_ms"]) / 1000, UTC)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def labels_of(settings: Settings, alertname: str, severity: str, destination: str | None,
              subscription: str | None, identity: Mapping[str, str]) -> dict[str, str]:
    """An alert's labels: what Alertmanager knows it by."""
    out = {**settings.alertmanager.labels, "alertname": alertname, "severity": severity,
           **identity}
    if destination:
        out["destination"] = destination
    if subscription:
        out["subscription"] = subscription
    return out


def runbook_url(settings: Settings, alertname: str) -> str:
    return f"{settings.alertmanager.runbook_url}#{alertname.lower()}"


def am_alerts(settings: Settings, alert: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Alertmanager alerts (fired and resolved) one of the job's alerts makes."""
    kind, at = alert["kind"], _at(alert)
    identity = _identity(alert)
    conf = settings.alertmanager

    def one(alertname: str, severity: str, ends: datetime) -> dict[str, Any]:
        details = alert.get("details")
        return {"labels": labels_of(settings, alertname, severity, alert.get("destination"),
                                    alert.get("subscription"), identity),
                "annotations": {"summary": str(alert.get("message") or kind),
                                "runbook_url": runbook_url(settings, alertname),
                                "details": details if isinstance(details, str)
                                else json.dumps(details, sort_keys=True, default=str)},
                "startsAt": _iso(min(at, ends)), "endsAt": _iso(ends)}

    if kind == "gap_filled_late":  # every lost tsnr came after all: nothing is lost now
        details = alert.get("details") or {}
        details = json.loads(details) if isinstance(details, str) else details
        return [] if details.get("settled") else [one("gap_unrecoverable", "critical", at)]
    if kind in STATEFUL:
        fires, resolves = STATEFUL[kind]
        out = [one(name, _FIRED_SEVERITY[name], at) for name in resolves]
        if fires is not None:
            out.append(one(fires, _FIRED_SEVERITY[fires], at + timedelta(hours=conf.hold_hours)))
        return out
    if alert.get("severity") in ("warning", "critical"):
        return [one(kind, alert["severity"], at + timedelta(hours=conf.event_hours))]
    return []


def gap_resolved(settings: Settings, row: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """The alert an operator's acknowledgement of a gap resolves (``urbpipe gaps ack``): the
    gap's ``gap_unrecoverable`` (``messages_missing`` for a hole in URBHMSNR, ``gap_open``
    while still open). ``row``: the gap's current ``gaps`` row."""
    alertname = ("messages_missing" if row.get("kind") == "messages" else
                 "gap_open" if row.get("state") in ("open", "requested") else
                 "gap_unrecoverable")
    return {"labels": labels_of(settings, alertname, _FIRED_SEVERITY[alertname],
                                row.get("destination"), row.get("subscription"),
                                {"gap": str(row["gap_id"])}),
            "annotations": {"summary": f"gap {row['gap_id']} acknowledged",
                            "runbook_url": runbook_url(settings, alertname)},
            "startsAt": _iso(at), "endsAt": _iso(at)}


def http_post(url: str, body: bytes, timeout_s: float) -> None:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        answer.read()


class AlertmanagerOut:
    """Posts the job's alerts to ``alertmanager.url`` (``/api/v2/alerts``); keeps what could
    not be posted for the next call."""

    def __init__(self, settings: Settings, post: Post = http_post) -> None:
        assert settings.alertmanager.url, "alertmanager.url is not set"
        self._settings = settings
        self._url = f"{settings.alertmanager.url}/api/v2/alerts"
        self._post = post
        self._pending: list[dict[str, Any]] = []
        self.error: str | None = None  # why the last post failed

    def send(self, alerts: list[Mapping[str, Any]]) -> int:
        """Post the Alertmanager alerts of the job's ``alerts`` (and any left from before);
        the number still pending (0: all delivered)."""
        return self.post([a for alert in alerts for a in am_alerts(self._settings, alert)])

    def post(self, am: list[dict[str, Any]]) -> int:
        """Post Alertmanager alerts as they are (and any left from before)."""
        self._pending += am
        del self._pending[:-MAX_PENDING]
        if not self._pending:
            return 0
        try:
            self._post(self._url, json.dumps(self._pending).encode(),
                       self._settings.alertmanager.timeout_seconds)
        except (OSError, urllib.error.URLError) as exc:  # never fail the batch
            self.error = str(exc)
            log.warning("Alertmanager %s did not take %d alert(s), kept for the next batch: %s",
                        self._url, len(self._pending), exc)
            return len(self._pending)
        self._pending, self.error = [], None
        return 0
