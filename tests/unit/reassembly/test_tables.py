"""events_to_rows: table columns, time conversion, alerts and request idempotency keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.tables import TABLES, events_to_rows, stck_to_datetime
from tests.unit.reassembly.builders import (
    STCK_2004,
    Feed,
    Harness,
    resend_of,
    status,
    statuses,
    trsp,
    txn,
)

NOW = 1_700_000_000_000
ISSUE_COLUMNS = {
    "transactions": {"subscription", "destination", "epoch", "tsnr", "dbid", "record_count",
                     "commit_time", "processed_time", "sent_time", "initial_state", "resent",
                     "origin", "token", "first_partition", "first_offset", "last_partition",
                     "last_offset", "landed_at"},
    "records": {"subscription", "destination", "epoch", "tsnr", "rsnr", "fnr", "isn", "type",
                "resend", "rsp", "subcode", "record_time"},
    "images": {"subscription", "destination", "epoch", "tsnr", "rsnr", "dsnr", "image_type",
               "payload", "acode", "wcode", "arc"},
    "status_events": {"rt", "st", "rsp", "subc", "token", "inam", "snam", "dnam", "tsnr",
                      "dbid", "fnr", "data", "time"},
    "gaps": {"subscription", "destination", "epoch", "from_tsnr", "to_tsnr", "state",
             "requests_sent", "opened_at", "updated_at", "closed_at", "reason"},
    "requests": {"subscription", "destination", "tsnr", "token", "idempotency_key"},
    "quarantine": {"reason", "topic", "partition", "offset"},
}


def scenario() -> tuple[Harness, list]:
    """A stream that touches every table."""
    h = Harness(ReassemblyConfig(request_token="TOK1", reply_destination="OUT3"), now_ms=NOW)
    feed = Feed()
    rows = feed.send(txn(1, 2), txn(4), txn(8, 2, rcnt=3), txn(9))  # gaps 2..3, 5..8
    partial = [r for r in feed.send(txn(10, 2), cuts=[3]) if r.offset == feed.offset - 2]
    h.feed(rows + partial)
    h.feed(statuses(feed, status("LOST", data=b"\x00\x04"), trsp(2, 35, rtok="TOK1"),
                    status("STRT")) + feed.send(resend_of(txn(3))), now_ms=NOW + 5)
    return h, h.events


def test_seed_stck_conversion() -> None:
    assert stck_to_datetime(STCK_2004) == datetime(2004, 6, 9, 15, 22, 52, 385856, tzinfo=UTC)
    assert stck_to_datetime(0) is None


def test_every_table_has_the_issue_columns() -> None:
    _, events = scenario()
    rows = events_to_rows(events, NOW)
    assert set(rows) == set(TABLES)
    for table, columns in ISSUE_COLUMNS.items():
        assert rows[table], table
        for row in rows[table]:
            assert columns <= set(row), (table, columns - set(row))


def test_transaction_rows_content() -> None:
    h = Harness(now_ms=NOW)
    rows = events_to_rows(h.feed(Feed().send(txn(1, 2))), NOW)
    [t] = rows["transactions"]
    assert t["commit_time"] == stck_to_datetime(STCK_2004 + (1000 << 12))
    assert t["landed_at"] == datetime.fromtimestamp(NOW / 1000, UTC)
    assert (t["origin"], t["resent"], t["initial_state"], t["record_count"]) == (
        "live", False, False, 2)
    assert [(r["rsnr"], r["type"]) for r in rows["records"]] == [(1, "U"), (2, "U")]
    assert [(i["rsnr"], i["dsnr"], i["image_type"]) for i in rows["images"]] == [
        (1, 1, "B"), (1, 2, "A"), (2, 1, "B"), (2, 2, "A")]
    assert rows["images"][0]["payload"] == b"1:1:1:xx"
    assert (rows["images"][0]["acode"], rows["images"][0]["wcode"]) == (819, 4091)


def test_gap_rows_are_transitions() -> None:
    _, events = scenario()
    rows = events_to_rows(events, NOW)
    by_gap: dict = {}
    for g in rows["gaps"]:
        by_gap.setdefault((g["epoch"], g["from_tsnr"], g["to_tsnr"]), []).append(g["state"])
    assert by_gap[(0, 2, 3)] == ["open", "requested", "unrecoverable"]
    # 5..7 never came and 8 was inconsistent: one gap, closed by the restart
    assert by_gap[(0, 5, 8)] == ["open", "requested", "unrecoverable"]
    assert by_gap[(0, 10, 10)] == ["open", "unrecoverable"]  # lost at the restart: no request
    # the resend of 3 arrived after the restart, committed before it: a late fill of epoch 0
    assert by_gap[(0, 3, 3)] == ["filled_late"]
    [late] = [g for g in rows["gaps"] if g["state"] == "filled_late"]
    assert (late["gap_id"], late["settled_tsnrs"], late["missing_count"]) == ("0:2", [2], 1)
    assert all(g["kind"] == "tsnr" for g in rows["gaps"])
    closed = [g for g in rows["gaps"] if g["state"] == "unrecoverable"]
    assert all(g["closed_at"] is not None for g in closed)
    assert all(g["closed_at"] is None for g in rows["gaps"] if g["state"] == "open")


def test_requests_one_per_tsnr_with_unique_keys() -> None:
    _, events = scenario()
    rows = events_to_rows(events, NOW)
    assert [(r["epoch"], r["tsnr"]) for r in rows["requests"]] == [
        (0, 2), (0, 3), (0, 5), (0, 6), (0, 7), (0, 8)]
    assert {r["token"] for r in rows["requests"]} == {"TOK1"}
    assert {r["reply_destination"] for r in rows["requests"]} == {"OUT3"}
    keys = [r["idempotency_key"] for r in rows["requests"]]
    assert len(set(keys)) == len(keys)


def test_alerts_are_json_and_keys_are_stable() -> None:
    _, events = scenario()
    alerts = events_to_rows(events, NOW)["alerts"]
    kinds = {a["kind"] for a in alerts}
    assert {"gap_open", "gap_requested", "gap_unrecoverable", "lost_continuation",
            "replicator_restart", "status_lost"} <= kinds
    json.dumps(alerts)
    keys = [a["idempotency_key"] for a in alerts]
    assert len(set(keys)) == len(keys)
    assert keys == [a["idempotency_key"] for a in events_to_rows(events, NOW + 99)["alerts"]]


def test_status_rows_and_quarantine() -> None:
    _, events = scenario()
    rows = events_to_rows(events, NOW)
    sts = {r["st"]: r for r in rows["status_events"]}
    assert set(sts) == {"LOST", "TRSP", "STRT"}
    assert sts["LOST"]["data"] == b"\x00\x04" and sts["TRSP"]["subc"] == 35
    assert sts["TRSP"]["rt"] == "TRAN" and sts["TRSP"]["tsnr"] == 2
    assert json.loads(sts["TRSP"]["fields_json"])["urbsrtok"] == "TOK1"
    [q] = rows["quarantine"]
    assert q["tsnr"] == 8 and q["kind"] == "inconsistent"


def test_resend_of_a_tsnr_settled_by_the_restart_lands_in_its_own_epoch() -> None:
    _h, events = scenario()
    rows = events_to_rows(events, NOW)
    # the resent tsnr 3 (URBTPTRN, committed before the new epoch began) arrived after STRT:
    # it is epoch 0's tsnr 3, settled by the restart, not epoch 1's: no gap 1..2 in epoch 1
    t3 = [t for t in rows["transactions"] if t["tsnr"] == 3]
    assert [t["epoch"] for t in t3] == [0] and t3[0]["origin"] == "resend"
    assert not [g for g in rows["gaps"] if g["epoch"] == 1]


def test_first_start_is_info_and_a_restart_is_a_warning() -> None:
    from pipeline.reassembly.events import EpochStarted

    start = EpochStarted("", "OUT1", 1, "STRT", 0, None, NOW)
    restart = EpochStarted("", "OUT1", 2, "REST", 1, 57, NOW)
    back = EpochStarted("COLOR", "OUT1", 1, "tsnr back to 1", 0, 12, NOW)
    alerts = events_to_rows([start, restart, back], NOW)["alerts"]
    assert [(a["kind"], a["severity"]) for a in alerts] == [
        ("replicator_start", "info"), ("replicator_restart", "warning"),
        ("replicator_restart", "warning")]


def test_gap_alert_severity_follows_the_transition() -> None:
    from pipeline.reassembly.events import GapFilled, GapOpened, GapUnrecoverable

    args = ("COLOR", "OUT1", 0, "0:5", 5, 5, (5,), 1, NOW, "", NOW)
    alerts = events_to_rows([GapOpened(*args), GapFilled(*args), GapUnrecoverable(*args)],
                            NOW)["alerts"]
    assert [(a["kind"], a["severity"]) for a in alerts] == [
        ("gap_open", "warning"), ("gap_filled", "info"), ("gap_unrecoverable", "critical")]
