"""``urbpipe quarantine``: list, and replay what the current codec now decodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.sim import Replicator, default_config
from pipeline.config import Settings
from pipeline.ops.cli import main
from pipeline.ops.lake import Lake
from pipeline.ops.quarantine_cmd import list_entries, replay
from tests.unit.ops.conftest import WriteTable, at


def good_message() -> bytes:
    return Replicator(default_config(), seed=1).start()[0].value


def q_row(offset: int, raw: bytes | None, source: str = "decode", when: float = 1.0) -> dict:
    return {"source": source, "destination": "OUT1", "subscription": "COLOR",
            "reason": "at offset 0: bad eye-catcher", "topic": "urb.out1", "partition": 1,
            "offset": offset, "elem_index": -1, "eye": "!ERR", "raw": raw,
            "quarantined_at": at(when), "batch_id": 1}


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_all(self, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
        self.sent += rows
        return [(r, 0, 1000 + i) for i, r in enumerate(rows)]


@pytest.fixture
def quarantined(write_table: WriteTable) -> None:
    write_table("quarantine", [
        q_row(10, good_message()),  # the codec decodes it now: replayable
        q_row(11, b"\x00" * 40),  # still garbage
        q_row(12, None, source="reassembly"),
        q_row(13, good_message(), source="decode_warning"),
        q_row(14, good_message(), when=-3600.0)])  # older than --since


def test_replay_sends_what_decodes_and_records_it(ops_settings: Settings,
                                                  quarantined: None) -> None:
    lake = Lake(ops_settings)
    dry = replay(ops_settings, lake, since=at(0), dry_run=True)
    assert (dry.candidates, dry.replayed, dry.still_failing, dry.not_replayable) == (2, 1, 1, 2)

    producer = FakeProducer()
    done = replay(ops_settings, lake, since=at(0), producer=producer)  # type: ignore[arg-type]
    assert [r["offset"] for r in producer.sent] == [10]
    assert (done.replayed, done.still_failing) == (1, 1)
    assert done.failures[0]["offset"] == 11

    again = replay(ops_settings, lake, since=at(0), producer=producer)  # type: ignore[arg-type]
    assert (again.already_replayed, again.replayed, len(producer.sent)) == (1, 0, 1)

    pending = {r["offset"] for r in list_entries(lake)}
    assert pending == {11, 12, 13, 14}
    everything = {r["offset"]: r["replayed_at"] for r in list_entries(lake, include_replayed=True)}
    assert everything[10] is not None and everything[11] is None


def test_quarantine_cli(conf_file: Path, quarantined: None,
                        capsys: pytest.CaptureFixture[str]) -> None:
    conf = ["--conf-file", str(conf_file)]
    assert main(["quarantine", "list", "--since", "2025-03-01T12:00:00", *conf]) == 1
    out = capsys.readouterr().out
    assert "urb.out1[1]@11" in out and "@14" not in out
    assert main(["quarantine", "replay", "--dry-run", "--json", *conf]) == 1  # one still fails
    report = json.loads(capsys.readouterr().out)
    assert (report["dry_run"], report["replayed"], report["still_failing"]) == (True, 2, 1)
    assert main(["quarantine", "list", "--since", "yesterday", *conf]) == 2


def test_reviewed_rows_stop_counting_and_are_kept_for_audit(
        conf_file: Path, quarantined: None, ops_settings: Settings,
        capsys: pytest.CaptureFixture[str]) -> None:
    conf = ["--conf-file", str(conf_file)]
    assert main(["quarantine", "ack", "urb.out1[1]@11", "urb.out1[1]@99", "--by", "alice",
                 *conf]) == 2  # a ref with no pending row: nothing recorded
    assert "urb.out1[1]@99" in capsys.readouterr().err
    assert main(["quarantine", "ack", "urb.out1[1]@11", "--by", "alice", "--note",
                 "connector test message", *conf]) == 0
    assert "acknowledged 1 quarantine row(s) by alice" in capsys.readouterr().out
    pending = {r["offset"] for r in list_entries(Lake(ops_settings))}
    assert pending == {10, 12, 13, 14}
    assert main(["quarantine", "ack", "--all", "--source", "reassembly", "--by", "bob",
                 *conf]) == 0
    assert main(["quarantine", "ack", "--all", "--by", "bob", "--note", "reviewed", *conf]) == 0
    capsys.readouterr()
    assert main(["quarantine", "list", *conf]) == 0  # nothing pending: a monitor stops paging
    assert capsys.readouterr().out.strip() == "quarantine is empty"
    assert main(["quarantine", "list", "--all", "--json", *conf]) == 0
    rows = {r["offset"]: r for r in json.loads(capsys.readouterr().out)}
    assert len(rows) == 5, "every row stays in quarantine"
    assert (rows[11]["acked_by"], rows[11]["ack_note"]) == ("alice", "connector test message")
    assert rows[12]["acked_by"] == "bob" and rows[10]["ack_note"] == "reviewed"
    assert main(["quarantine", "ack", "--all", "--by", "carol", *conf]) == 0
    assert "(none pending)" in capsys.readouterr().out
    assert main(["quarantine", "ack", "--by", "carol", *conf]) == 2  # neither rows nor --all
