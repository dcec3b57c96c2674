"""``urbpipe files``: each file's status (stale, truncated) and layout version, from the
file_status and layouts tables and the conf's layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.ops.cli import main
from tests.unit.ops.conftest import WriteTable, at

LAYOUT = """layouts:
  - subscription: COLOR
    dbid: 10006
    fnr: 4
    format_buffer: "AA,16,A."
    columns: {AA: color}
"""


def status(fnr: int, state: str, version: int, **extra: object) -> dict:
    return {"dbid": 10006, "fnr": fnr, "status": state, "version": version,
            "since": at(version), "updated_at": at(version), "file_name": f"FILE{fnr}",
            **extra}


@pytest.fixture
def files_lake(conf_file: Path, write_table: WriteTable) -> Path:
    conf_file.write_text(conf_file.read_text() + LAYOUT)
    write_table("file_status", [
        status(4, "stale", 1, stale_kinds="load", reason="ADALOD LOAD ended (UTYP 1)"),
        status(4, "active", 2, truncated_before=at(2), reason="REFRESH ended"),
        status(11, "active", 1), status(11, "stale", 2, stale_kinds="lost,restore",
                                        reason="utility status lost")])
    write_table("layouts", [
        {"subscription": "COLOR", "dbid": 10006, "fnr": 4, "gfid": "G1", "created": at(1),
         "field_count": 2},
        {"subscription": "COLOR", "dbid": 10006, "fnr": 4, "gfid": "G1", "created": at(5),
         "field_count": 3},
        {"subscription": "COLOR", "dbid": 10006, "fnr": 4, "gfid": "G1", "created": at(5),
         "field_count": 3}])  # the same version seen twice
    return conf_file


def test_files_shows_status_truncation_and_layout(files_lake: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["files", "--conf-file", str(files_lake)]) == 1  # file 11 is stale
    out = capsys.readouterr().out
    assert "10006/4 FILE4 → current_color_4: ACTIVE" in out
    assert "GFFT G1 of 2025-03-01 12:00:05 (3 fields; 2 version(s) seen) + conf format " \
           "buffer" in out
    assert "truncated: changes before 2025-03-01 12:00:02" in out
    assert "10006/11 FILE11: STALE (lost, restore) since 2025-03-01 12:00:02: utility status " \
           "lost" in out
    assert main(["files", "--json", "--conf-file", str(files_lake)]) == 1
    found = {f["fnr"]: f for f in json.loads(capsys.readouterr().out)}
    assert (found[11]["status"], found[11]["problem"], found[4]["problem"]) == (
        "stale", True, False)
    assert found[4]["gfft_versions"] == 2 and found[4]["truncated_before"].startswith("2025")


def test_no_stale_file_exits_0(conf_file: Path, write_table: WriteTable,
                               capsys: pytest.CaptureFixture[str]) -> None:
    write_table("file_status", [status(4, "active", 1)])
    assert main(["files", "--conf-file", str(conf_file)]) == 0
    assert "layout: none (raw tables only)" in capsys.readouterr().out
