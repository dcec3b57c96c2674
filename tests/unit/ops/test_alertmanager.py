"""The job's gap alerts through a real Alertmanager (Debian's, the example configuration) to a
webhook receiver this test runs: fired when a gap opens or becomes unrecoverable, resolved
when it fills or an operator acknowledges it (``urbpipe gaps ack``); gap alerts held back
while the job is down; nothing lost while Alertmanager is unreachable.

The alert rows are the state machine's own (``events_to_rows`` of gap events), posted the
way the job's landing step posts them (``AlertmanagerOut``).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pipeline.alertmanager import AlertmanagerOut, am_alerts
from pipeline.config import Settings, load_settings
from pipeline.ops.cli import main
from pipeline.reassembly.events import GapFilled, GapOpened, GapRequested, GapUnrecoverable
from pipeline.reassembly.tables import events_to_rows
from tests.support.monitor_servers import Webhook, alertmanager, alertmanager_alerts
from tests.unit.ops.conftest import WriteTable

T0_MS = int(time.time() * 1000) - 60_000  # a minute ago: the alerts are current


def gap_events(gap_id: str, tsnr: int, end: type) -> list[Any]:
    """A gap's life: opened, requested, then ``end`` (filled or unrecoverable)."""
    common = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "gap_id": gap_id,
              "from_tsnr": tsnr, "to_tsnr": tsnr, "opened_at_ms": T0_MS,
              "reason": "transaction(s) never received"}
    finished = {"filled": (tsnr,)} if end is GapFilled else {"settled": (tsnr,)}
    return [GapOpened(**common, missing=(tsnr,), requests_sent=0, at_ms=T0_MS),
            GapRequested(**common, missing=(tsnr,), requests_sent=1, at_ms=T0_MS + 10,
                         tsnrs=(tsnr,)),
            end(**common, missing=(), requests_sent=3, at_ms=T0_MS + 20, **finished)]


def job_alerts(events: list[Any]) -> list[dict[str, Any]]:
    """The alert rows the job lands for ``events`` (details as the JSON column holds them)."""
    return [{**a, "details": json.dumps(a["details"])}
            for a in events_to_rows(events, T0_MS + 30)["alerts"]]


@pytest.fixture
def webhook() -> Any:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def am_url(tmp_path: Path, webhook: Webhook) -> Any:
    with alertmanager(tmp_path / "alertmanager", webhook) as url:
        yield url


def settings_for(url: str) -> Settings:
    return Settings(alertmanager={"url": url})


def gap(labels: dict[str, str], gap_id: str, name: str) -> bool:
    return labels.get("gap") == gap_id and labels["alertname"] == name


def test_a_filled_gap_fires_then_resolves_at_the_webhook(am_url: str, webhook: Webhook) -> None:
    out = AlertmanagerOut(settings_for(am_url))
    opened, requested, filled = job_alerts(gap_events("1:5", 5, GapFilled))
    assert out.send([opened, requested]) == 0
    seen = webhook.wait_for(lambda got: any(gap(lb, "1:5", "gap_open") for _, _, lb in got))
    receiver, status, labels = next(a for a in seen if gap(a[2], "1:5", "gap_open"))
    assert (receiver, status) == ("tickets", "firing")  # warning: a ticket, not a page
    assert labels == {"alertname": "gap_open", "severity": "warning", "job": "urbpipe",
                      "destination": "OUT1", "subscription": "COLOR", "gap": "1:5"}
    assert out.send([filled]) == 0
    webhook.wait_for(lambda got: ("tickets", "resolved", labels) in got)


def test_an_unrecoverable_gap_pages_until_an_operator_acknowledges_it(
        am_url: str, webhook: Webhook, conf_file: Path, write_table: WriteTable) -> None:
    events = gap_events("1:7", 7, GapUnrecoverable)
    AlertmanagerOut(settings_for(am_url)).send(job_alerts(events))
    seen = webhook.wait_for(lambda got: any(r == "pager" and gap(lb, "1:7", "gap_unrecoverable")
                                            for r, _, lb in got))
    page = next(a for a in seen if gap(a[2], "1:7", "gap_unrecoverable"))
    assert page[1] == "firing" and page[2]["severity"] == "critical"
    fired = alertmanager_alerts(am_url)
    (lost,) = [a for a in fired if a["labels"]["alertname"] == "gap_unrecoverable"]
    assert lost["annotations"]["runbook_url"].endswith("/docs/runbook.md#gap_unrecoverable")
    assert "1:7" not in {a["labels"].get("gap") for a in fired
                         if a["labels"]["alertname"] == "gap_open"}, "the open alert ended"

    write_table("gaps", events_to_rows(events, T0_MS + 30)["gaps"])  # as the job landed them
    conf_file.write_text(conf_file.read_text() + f"alertmanager:\n  url: {am_url}\n")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["gaps", "ack", "OUT1/COLOR/1:7", "--conf-file", str(conf_file),
                     "--by", "oncall", "--note", "resynced file 4 (runbook)"]) == 0
    assert "resolved its alert in Alertmanager" in out.getvalue()
    webhook.wait_for(lambda got: ("pager", "resolved", page[2]) in got)


def _settled(url: str, mine: Callable[[dict[str, Any]], bool], states: dict[str, str],
             timeout_s: float = 30.0) -> dict[str, dict[str, Any]]:
    """Alertmanager's alerts that are ``mine`` by name, once each has the state ``states``
    gives it or ``timeout_s`` passed: it inhibits asynchronously, after the post returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {a["labels"]["alertname"]: a for a in alertmanager_alerts(url) if mine(a)}
        if all(found.get(n, {}).get("status", {}).get("state") == st
               for n, st in states.items()) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_gap_alerts_wait_while_the_job_is_down(am_url: str, webhook: Webhook) -> None:
    out = AlertmanagerOut(settings_for(am_url))
    down = {"labels": {"alertname": "UrbpipeJobDown", "severity": "critical", "job": "urbpipe"},
            "annotations": {}, "startsAt": datetime.now(UTC).isoformat()}
    assert out.post([down]) == 0
    out.send(job_alerts(gap_events("1:9", 9, GapUnrecoverable)))
    found = _settled(am_url, lambda a: a["labels"].get("gap") == "1:9"
                     or a["labels"]["alertname"] == "UrbpipeJobDown",
                     {"UrbpipeJobDown": "active", "gap_unrecoverable": "suppressed"})
    assert found["UrbpipeJobDown"]["status"]["state"] == "active"
    assert found["gap_unrecoverable"]["status"]["state"] == "suppressed"
    assert found["gap_unrecoverable"]["status"]["inhibitedBy"]


def test_alerts_alertmanager_did_not_take_are_posted_with_the_next_ones() -> None:
    posts: list[list[dict[str, Any]]] = []
    fail = [True]

    def post(url: str, body: bytes, timeout_s: float) -> None:
        assert url == "http://am.invalid:9093/api/v2/alerts" and timeout_s == 5
        if fail[0]:
            raise OSError("connection refused")
        posts.append(json.loads(body))

    out = AlertmanagerOut(settings_for("http://am.invalid:9093"), post)
    opened, _requested, filled = job_alerts(gap_events("1:5", 5, GapFilled))
    assert out.send([opened]) == 1 and out.error == "connection refused"
    fail[0] = False
    assert out.send([filled]) == 0
    (body,) = posts
    assert [(a["labels"]["alertname"], a["startsAt"] < a["endsAt"]) for a in body] == [
        ("gap_open", True), ("gap_open", False)]  # fired, then resolved
    assert out.send([]) == 0 and len(posts) == 1  # nothing pending: no post


def test_what_each_kind_becomes() -> None:
    settings = load_settings(Path("/dev/null"), env={})  # defaults
    at = "2025-03-01T12:00:00+00:00"

    def alert(kind: str, severity: str, **details: Any) -> dict[str, Any]:
        return {"kind": kind, "severity": severity, "destination": "OUT1",
                "subscription": "COLOR", "epoch": 1, "message": kind, "at": at,
                "at_ms": 0, "idempotency_key": f"{kind}|x", "details": details}

    def names(a: dict[str, Any]) -> list[tuple[str, bool]]:
        return [(x["labels"]["alertname"], x["endsAt"] > x["startsAt"])
                for x in am_alerts(settings, a)]

    assert names(alert("gap_unrecoverable", "critical", gap_id="1:2")) == [
        ("gap_open", False), ("gap_unrecoverable", True)]
    assert names(alert("gap_filled_late", "info", gap_id="1:2", settled=[])) == [
        ("gap_unrecoverable", False)]
    assert names(alert("gap_filled_late", "info", gap_id="1:2", settled=[3])) == []
    assert names(alert("storm_tripped", "critical")) == [("storm_tripped", True)]
    assert names(alert("storm_resumed", "info")) == [("storm_tripped", False)]
    assert names(alert("request_rejected", "critical", tsnr=4)) == [("request_rejected", True)]
    assert names(alert("replicator_start", "info")) == []
    (event,) = am_alerts(settings, alert("transaction_unplaced", "critical", tsnr=4))
    assert event["labels"]["event"] == "transaction_unplaced|x"
