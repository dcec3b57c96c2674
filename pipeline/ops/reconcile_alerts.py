"""What a reconciliation round tells operators: an ``alerts`` row per file, sent like the job's
own alerts — to ``topics.alerts``, into the ``alerts`` table, and to Alertmanager when conf names
one (``pipeline.alertmanager``).

* ``reconcile_repaired`` (info): rows the round found drifted and the job's landing of the
  answers repaired;
* ``reconcile_drift`` (warning): drift left unrepaired (``reconcile.repair: false``, or a row
  the version guard kept), or a drifted share of the file's ISNs above
  ``reconcile.drift_warning_ratio``: something writes the lake besides the job, or lost what it
  should have landed.

Idempotency key ``<kind>|<round token>|<sub>/<dbid>/<fnr>``: a round is sent once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipeline.config import Settings
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients
from pipeline.ops.lake import Lake
from pipeline.reconciliation import rounds
from pipeline.spark.land.tables import arrow_schema

REPAIRED = "reconcile_repaired"
DRIFT = "reconcile_drift"
_LISTED = 100  # ISNs named per verdict in an alert's details


def round_alerts(settings: Settings, token: str, files: Sequence[Any],
                 now: datetime | None = None) -> list[dict[str, Any]]:
    """The alerts of a round's files (``reconcile_cmd.FileRound``)."""
    at = now or datetime.now(UTC)
    out = []
    for fr in files:
        drift = [v for v in fr.verdicts if v.is_drift]
        if not drift:
            continue
        left = [v for v in drift if v.isn not in fr.repaired]
        ratio = rounds.drift_ratio(fr.verdicts)
        details = {"round": token, "file": fr.name, "isns_checked": len(fr.verdicts),
                   "drift_ratio": round(ratio, 6),
                   **{name: sorted(v.isn for v in drift if v.verdict == name)[:_LISTED]
                      for name in ("differs", "missing_in_lake", "extra_in_lake")},
                   "not_repaired": sorted(v.isn for v in left)[:_LISTED]}
        repaired = len(drift) - len(left)
        if repaired:
            out.append(_file_alert(
                REPAIRED, "info", fr, token, at, details,
                f"{fr.name}: reconcile round {token} repaired {repaired} row(s) that did not "
                f"equal Adabas ({rounds.in_words(rounds.tally(drift))})"))
        if left or ratio > settings.reconcile.drift_warning_ratio:
            why = (f"{len(left)} drifted row(s) not repaired" if left else
                   f"{ratio:.1%} of the ISNs checked drifted (more than "
                   f"reconcile.drift_warning_ratio {settings.reconcile.drift_warning_ratio:g})")
            out.append(_file_alert(DRIFT, "warning", fr, token, at, details,
                                   f"{fr.name}: reconcile round {token}: {why}"))
    return out


def _file_alert(kind: str, severity: str, fr: Any, token: str, at: datetime,
           details: dict[str, Any], message: str) -> dict[str, Any]:
    return {"idempotency_key": f"{kind}|{token}|{fr.name}", "kind": kind, "severity": severity,
            "subscription": fr.lay.subscription, "destination": None, "epoch": None,
            "message": message, "at": at, "at_ms": int(at.timestamp() * 1000),
            "details": details}


def send_alerts(settings: Settings, lake: Lake, alerts: list[dict[str, Any]]) -> str | None:
    """Into the ``alerts`` table, onto ``topics.alerts``, and to Alertmanager if conf names
    one; what could not be delivered (the command prints it; the verdicts are kept)."""
    if not alerts:
        return None
    schema = arrow_schema("alerts")
    rows = [{**{n: a.get(n) for n in schema.names}, "details": json.dumps(a["details"])}
            for a in alerts]
    lake.append("alerts", pa.Table.from_pylist(rows, schema))
    producer = kafka_clients.producer(settings, ClientErrors())
    for a in alerts:
        body = json.dumps(a, sort_keys=True, default=str).encode()
        producer.produce(settings.topics.alerts, key=a["idempotency_key"].encode(), value=body,
                         headers=[("idempotency_key", a["idempotency_key"].encode()),
                                  ("kind", a["kind"].encode())])
    left, failed = kafka_clients.flush(producer, 30)
    if left or failed:
        return f"{left + len(failed)} alert(s) not delivered to {settings.topics.alerts}"
    if settings.alertmanager.url:
        from pipeline.alertmanager import AlertmanagerOut

        pager = AlertmanagerOut(settings)
        if pager.send(alerts):
            return f"Alertmanager {settings.alertmanager.url} did not take the alerts: " \
                   f"{pager.error}"
    return None
