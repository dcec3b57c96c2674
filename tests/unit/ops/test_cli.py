"""The ``urbpipe`` entry point: help, exit codes, dump, and two runs as a real subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.sim import Replicator, default_config
from pipeline.ops.cli import main, parse_since
from tests.unit.ops.conftest import WriteTable, at, transaction

URBPIPE = shutil.which("urbpipe", path=str(Path(sys.executable).parent)) or "urbpipe"


@pytest.mark.parametrize("argv", [
    ["--help"], ["status", "--help"], ["request", "--help"], ["request", "tran", "--help"],
    ["request", "inst", "--help"], ["gaps", "ack", "--help"], ["quarantine", "replay", "--help"],
    ["dump", "--help"]])
def test_help_documents_exit_codes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "3  broker or lake unreachable" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["request", "tran", "COLOR"]) == 2  # tsnr missing
    assert main(["status", "--conf-file", "/nonexistent/conf.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_parse_since() -> None:
    assert parse_since("2h", now=at(7200)) == at(0)
    assert parse_since("2025-03-01T12:00:00") == at(0)


def test_dump_delegates_to_the_codec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = tmp_path / "m.bin"
    message.write_bytes(Replicator(default_config(), seed=1).start()[0].value)
    assert main(["dump", str(message), "--single"]) == 0
    assert "URBS element" in capsys.readouterr().out
    message.write_bytes(b"\x00\x00\x00\x08garbage!")
    assert main(["dump", str(message)]) == 1


def test_status_as_a_subprocess(conf_file: Path, write_table: WriteTable) -> None:
    write_table("transactions", [transaction("COLOR", 1)])
    run = subprocess.run([URBPIPE, "status", "--conf-file", str(conf_file), "--no-kafka",
                          "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    keys = {(k["subscription"], k["last_tsnr"]) for k in json.loads(run.stdout)["keys"]}
    assert ("COLOR", 1) in keys


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    run = subprocess.run([URBPIPE, "gaps", "list", "--conf-file", str(tmp_path / "none.yaml")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
