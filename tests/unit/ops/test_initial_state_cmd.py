"""``urbpipe initial-state list``: INST requests and their state from requests + alerts rows."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipeline.config import Settings
from pipeline.ops.cli import main
from pipeline.ops.initial_state_cmd import current_requests
from pipeline.reassembly.events import InitialStateChanged, InitialStateRequested
from pipeline.reassembly.tables import events_to_rows
from pipeline.spark.land.tables import arrow_schema, table_path
from tests.unit.ops.conftest import T0, WriteTable

T0_MS = int(T0.timestamp() * 1000)


def asked(request_id: str, isns: tuple[int, ...] = (5, 9), at: int = 0,
          sub: str = "COLOR") -> InitialStateRequested:
    return InitialStateRequested(
        subscription=sub, destination="OUT1", epoch=1, request_id=request_id, name="ICOLOR",
        files=((10006, 4, isns),), tsnrs=(3,), token="URBPIPE", reply_destination="REPLY",
        at_ms=T0_MS + at)


def moved(request_id: str, state: str, at: int, rsp: int = 0, subcode: int = 0,
          reason: str = "", token: str = "URBPIPE") -> InitialStateChanged:
    return InitialStateChanged(
        subscription="COLOR", destination="OUT1", epoch=1, request_id=request_id, state=state,
        name="ICOLOR", dbid=10006, fnr=4, token=token, rsp=rsp, subcode=subcode, reason=reason,
        isn_count=0 if request_id.startswith("ext:") else 2, requested_at_ms=T0_MS,
        at_ms=T0_MS + at)


def rows(*events: Any) -> tuple[list[dict], list[dict]]:
    """The requests and alerts rows the job lands for these events (details as JSON text)."""
    out = events_to_rows(events, T0_MS)
    alerts = [{**a, "details": json.dumps(a["details"]), "at": datetime.fromisoformat(a["at"])}
              for a in out["alerts"]]
    return out["requests"], alerts


STORY = (
    asked("job:1"), moved("job:1", "started", 5), moved("job:1", "completed", 9),
    asked("job:2", isns=(7,), at=20),
    moved("job:2", "failed", 25, 131, 12, "ERRO: response 131 subcode 12 (…)"),
    asked("job:3", at=30), moved("job:3", "overdue", 90),
    asked("job:4", at=40),
    moved("ext:OPS:42", "started", 50, token="OPS"),
)


def test_each_request_ends_in_its_latest_state() -> None:
    found = {r.request_id: r for r in current_requests(*rows(*STORY))}
    assert {k: r.state for k, r in found.items()} == {
        "job:1": "completed", "job:2": "failed", "job:3": "overdue", "job:4": "requested",
        "ext:OPS:42": "started"}
    assert found["job:2"].is_problem and found["job:3"].is_problem
    assert not found["job:4"].is_problem and not found["job:1"].is_problem
    assert (found["job:2"].isn_count, found["job:2"].dbid, found["job:2"].fnr) == (1, 10006, 4)
    assert found["ext:OPS:42"].token == "OPS" and found["ext:OPS:42"].isn_count == 0
    assert found["job:1"].ref == "OUT1/COLOR/job:1"


def test_a_late_reply_after_overdue_wins_and_tran_rows_are_ignored() -> None:
    requests, alerts = rows(asked("job:1"), moved("job:1", "overdue", 60),
                            moved("job:1", "completed", 61))
    requests.append({"subscription": "COLOR", "destination": "OUT1", "kind": "TRAN",
                     "request_id": None, "tsnr": 3})
    [only] = current_requests(requests, alerts)
    assert only.state == "completed"


def test_same_request_ids_of_two_subscriptions_stay_apart() -> None:
    found = current_requests(*rows(asked("job:1"), asked("job:1", sub="EMPLOYEE")))
    assert sorted(r.ref for r in found) == ["OUT1/COLOR/job:1", "OUT1/EMPLOYEE/job:1"]


def test_initial_state_list_through_the_cli(conf_file: Path, write_table: WriteTable,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    requests, alerts = rows(*STORY)
    write_table("requests", requests)
    write_table("alerts", alerts)
    conf = ["--conf-file", str(conf_file)]
    assert main(["initial-state", "list", *conf]) == 1
    out = capsys.readouterr().out
    assert "OUT1/COLOR/job:2" in out and "failed" in out and "subcode 12" in out
    assert "job:1 " not in out, "completed requests only with --all"
    assert main(["initial-state", "list", "--all", "--json", *conf]) == 1
    listed = {r["ref"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["OUT1/COLOR/job:1"]["state"] == "completed"
    assert listed["OUT1/COLOR/job:3"]["problem"] is True


def test_only_completed_requests_are_no_problem(conf_file: Path, write_table: WriteTable,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    requests, alerts = rows(asked("job:1"), moved("job:1", "completed", 9))
    write_table("requests", requests)
    write_table("alerts", alerts)
    assert main(["initial-state", "list", "--conf-file", str(conf_file)]) == 0
    assert capsys.readouterr().out.strip() == "no initial-state requests"


def test_a_requests_table_from_before_inst_requests_still_lists(
        conf_file: Path, ops_settings: Settings, write_table: WriteTable,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A lake written by an older job: ``requests`` without the INST columns."""
    old = pa.schema([f for f in arrow_schema("requests")
                     if f.name not in ("kind", "initial_state", "dbid", "fnr", "isns",
                                       "request_id")])
    row = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": 3, "attempt": 1}
    write_deltalake(table_path(ops_settings, "requests"),
                    pa.Table.from_pylist([row], schema=old), mode="append")
    write_table("alerts", rows(moved("ext:OPS:42", "failed", 5, 131, 9, token="OPS"))[1])
    assert main(["initial-state", "list", "--json", "--conf-file", str(conf_file)]) == 1
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["request_id"], listed["state"]) == ("ext:OPS:42", "failed")
