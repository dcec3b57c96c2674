"""``python -m pipeline.urb dump``: run as operators run it, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.urb import requests as rq

from .conftest import FIXTURES, load

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.urb", "dump", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def test_single_message_file() -> None:
    out = run(str(FIXTURES / "07_inst_erro_reply_ebcdic.bin"))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "URBH element at offset X'0000'" in text
    assert "URBS element at offset X'0040'" in text
    assert 'urbsst = "ERRO" Initial-state processing ERROR' in text
    assert "urbssubc = 12 The initial-state definition has no file with the DBID/FNR" in text
    assert "urbhtime = 2004-06-09 15:44:22.506906 UTC" in text
    assert "urbhbord = X'0001'" in text


def test_data_message_from_stdin_shows_payload() -> None:
    out = run("-", stdin=load("05_color_data_ebcdic"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("URBR element") == 3
    assert 'urbrtyp = "R" initial state' in out.stdout
    assert "urbtttim = 2004-06-09 15:22:52.385856 UTC" in out.stdout
    assert "*GREEN           *" in out.stdout  # payload text in the message's code page


def test_length_prefixed_capture_autodetected(tmp_path: Path) -> None:
    messages = [
        load("04_inst_init_reply_ebcdic"),
        load("10_employee_data_ascii"),
        rq.tran("COLOR", "OUT1", 35),
    ]
    capture = tmp_path / "capture.bin"
    capture.write_bytes(b"".join(len(m).to_bytes(4, "big") + m for m in messages))
    out = run(str(capture))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("=== message") == 3
    assert "ASCII, little endian" in out.stdout
    assert 'urbirt = "TRAN" prior-transaction request' in out.stdout
    assert "urbitsnr = 35" in out.stdout
    forced = run("--framed", str(capture))
    assert forced.stdout == out.stdout


def test_bad_message_reports_offset_and_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(load("05_color_data_ebcdic")[:300])
    out = run("--single", str(bad))
    assert out.returncode == 1
    assert "error: at offset 12" in out.stdout and "truncated" in out.stdout


def test_bad_length_prefix(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes((1000).to_bytes(4, "big") + load("02_clsd_reply_clos_ebcdic"))
    out = run(str(bad))
    assert out.returncode == 1
    assert "length prefix 1000" in out.stdout


def test_missing_file_and_bad_codepage() -> None:
    assert run("/nonexistent/file.bin").returncode == 2
    assert run("--codepage", "nope", "-", stdin=b"").returncode == 2
