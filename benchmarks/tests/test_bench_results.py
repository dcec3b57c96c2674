"""benchmarks/results.py: a benchmark's rows land as JSON with the command, commit and machine."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results import machine, write_results


def test_rows_are_written_with_the_command_commit_and_machine(tmp_path: Path) -> None:
    rows = [{"corpus": "COLOR", "msgs_per_s": 91_802, "ratio": 13.3},
            {"corpus": "EMPLOYEE", "msgs_per_s": 119_536, "ratio": 11.9}]
    path = write_results("codec", rows, folder=tmp_path / "results",
                         argv=["benchmarks/bench_codec.py", "--seconds", "4"])
    assert path == tmp_path / "results" / "codec.json"
    document = json.loads(path.read_text())
    assert document["benchmark"] == "codec"
    assert document["rows"] == rows
    assert document["command"] == "benchmarks/bench_codec.py --seconds 4"
    assert document["commit"] is None or len(document["commit"]) >= 7
    assert document["machine"]["cores"] >= 1 and document["machine"]["memory_gb"] > 0


def test_a_second_run_replaces_the_first(tmp_path: Path) -> None:
    write_results("state", [{"batch": 2000}], folder=tmp_path, argv=["a"])
    write_results("state", [{"batch": 20000}], folder=tmp_path, argv=["b"])
    assert json.loads((tmp_path / "state.json").read_text())["rows"] == [{"batch": 20000}]


def test_the_machine_names_cores_memory_and_python() -> None:
    assert set(machine()) == {"cores", "memory_gb", "arch", "python"}
