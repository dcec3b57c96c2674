"""Gap state from transition rows, acknowledgements in the gap_acks table, ``gaps`` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.errors import UsageError
from pipeline.ops.cli import main
from pipeline.ops.gaps_cmd import current_gaps, find_gap
from tests.unit.ops.conftest import WriteTable, at, gap_row


def test_latest_transition_wins_and_same_batch_uses_transition_order() -> None:
    rows = [gap_row("COLOR", 5, "open", 1), gap_row("COLOR", 5, "requested", 2),
            gap_row("COLOR", 5, "filled", 2),  # same time and batch: filled after requested
            gap_row("EMPLOYEE", 7, "open", 1), gap_row("EMPLOYEE", 7, "unrecoverable", 9)]
    gaps = {g.ref: g for g in current_gaps(rows, [])}
    assert gaps["OUT1/COLOR/1:5"].state == "filled"
    assert not gaps["OUT1/COLOR/1:5"].is_problem
    assert gaps["OUT1/EMPLOYEE/1:7"].state == "unrecoverable"
    assert gaps["OUT1/EMPLOYEE/1:7"].is_problem


def test_ack_settles_an_unrecoverable_gap() -> None:
    rows = [gap_row("EMPLOYEE", 7, "unrecoverable", 9)]
    acks = [{"destination": "OUT1", "subscription": "EMPLOYEE", "gap_id": "1:7",
             "acked_by": "ops", "note": None, "acked_at": at(20)}]
    (gap,) = current_gaps(rows, acks)
    assert gap.ack is not None and gap.ack.by == "ops"
    assert not gap.is_problem


def test_job_gap_ids_repeat_across_subscriptions() -> None:
    gaps = current_gaps([gap_row("COLOR", 5, "open", 1), gap_row("EMPLOYEE", 5, "open", 1)], [])
    assert len(gaps) == 2
    with pytest.raises(UsageError, match="ambiguous"):
        find_gap(gaps, "1:5")
    assert find_gap(gaps, "OUT1/EMPLOYEE/1:5").row["subscription"] == "EMPLOYEE"
    with pytest.raises(UsageError, match="no gap"):
        find_gap(gaps, "9:9")


def test_gaps_list_and_ack_through_the_cli(conf_file: Path, ops_settings: Settings,
                                           write_table: WriteTable,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    write_table("gaps", [gap_row("COLOR", 5, "open", 1), gap_row("COLOR", 5, "filled", 3),
                         gap_row("EMPLOYEE", 7, "unrecoverable", 4)])
    conf = ["--conf-file", str(conf_file)]
    assert main(["gaps", "list", *conf]) == 1
    out = capsys.readouterr().out
    assert "OUT1/EMPLOYEE/1:7" in out and "OUT1/COLOR/1:5" not in out

    assert main(["gaps", "ack", "1:7", "--by", "alice", "--note", "reloaded from backup",
                 *conf]) == 0
    assert "acknowledged OUT1/EMPLOYEE/1:7" in capsys.readouterr().out

    assert main(["gaps", "list", *conf]) == 0
    assert main(["gaps", "list", "--all", "--json", *conf]) == 0
    listed = {g["ref"]: g for g in json.loads(capsys.readouterr().out.split("\n", 1)[1])}
    assert listed["OUT1/EMPLOYEE/1:7"]["acknowledged_by"] == "alice"
    assert listed["OUT1/EMPLOYEE/1:7"]["ack_note"] == "reloaded from backup"
    assert listed["OUT1/COLOR/1:5"]["state"] == "filled"


def test_ack_of_unknown_gap_is_a_usage_error(conf_file: Path, write_table: WriteTable,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    write_table("gaps", [gap_row("COLOR", 5, "open", 1)])
    assert main(["gaps", "ack", "4:4", "--by", "bob", "--conf-file", str(conf_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no gap") and err.count("\n") == 1


def test_a_resume_command_names_its_key_and_who_sent_it() -> None:
    import json

    from pipeline.errors import UsageError
    from pipeline.ops.gaps_cmd import resume_command

    key, value = resume_command("OUT1/COLOR", "alice", "one partition now")
    doc = json.loads(value)
    assert key == ("OUT1", "COLOR")
    assert (doc["command"], doc["destination"], doc["subscription"], doc["by"], doc["note"]) == (
        "resume", "OUT1", "COLOR", "alice", "one partition now")
    for bad in ("OUT1", "OUT1/", "/COLOR", "A/B/C"):
        with pytest.raises(UsageError):
            resume_command(bad, "alice", None)
    with pytest.raises(UsageError):
        resume_command("OUT1/COLOR", " ", None)


def test_lost_messages_and_partly_late_filled_gaps_are_problems_until_acknowledged() -> None:
    from pipeline.ops.gaps_cmd import Ack, Gap

    now = at(0)
    lost = Gap({"state": "lost", "kind": "messages", "gap_id": "msnr:0:5"}, None)
    late = Gap({"state": "filled_late", "missing_count": 2, "gap_id": "1:3"}, None)
    whole = Gap({"state": "filled_late", "missing_count": 0, "gap_id": "1:3"}, None)
    assert lost.is_problem and late.is_problem and not whole.is_problem
    assert not Gap(lost.row, Ack("bob", None, now)).is_problem
