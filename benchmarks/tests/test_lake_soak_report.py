"""The lake soak's report (benchmarks/lake_soak_report.py): pure helpers over metrics files."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.lake_soak_report import report, windows


def _record(batch: int, ms: int, maintain_ms: int = 0, compacted: int = 0) -> dict:
    return {"batch_id": batch, "duration_ms": ms, "durations_ms": {"walCommit": 10},
            "latency_s": {"commit_to_landed": {"p50": ms / 1000}},
            "counts": {"t_delta_ms": ms // 2, "t_state_ms": ms // 4,
                       "t_maintain_ms": maintain_ms, "maint_compacted": compacted}}


def test_windows_average_each_slice_and_count_its_maintenance_pauses() -> None:
    records = [_record(0, 1000), _record(1, 3000, 40_000, 4), _record(2, 2000)]
    first, second = windows(records, 2)
    assert (first.first, first.last, first.batch_ms, first.delta_ms) == (0, 1, 2000, 1000)
    assert (first.maintain_batches, first.maintain_max_ms, first.compacted) == (1, 40_000, 4)
    assert first.landed_p50_s == 2.0
    assert (second.first, second.last, second.batch_ms, second.maintain_batches) == (2, 2, 2000, 0)


def test_report_names_each_phase_with_its_samples_and_log_files(tmp_path: Path) -> None:
    phase = tmp_path / "on"
    (phase / "lake" / "records" / "_delta_log").mkdir(parents=True)
    for name in ("00000.json", "00000.crc"):
        (phase / "lake" / "records" / "_delta_log" / name).write_text("{}")
    (phase / "metrics.jsonl").write_text("\n".join(json.dumps(_record(b, 1000))
                                                   for b in range(3)) + "\n")
    sample = {"phase": "on", "batches": 2, "files": {"records": 7}, "log_mb": 1.5,
              "count_by_fnr_s": 0.5, "isn_history_s": 0.25}
    (tmp_path / "lake_soak.json").write_text(json.dumps({"samples": [sample]}))
    text = "\n".join(report(tmp_path, 200))
    assert "phase on: 3 batches" in text
    assert "| 2 | 0 | 7 |" in text  # transactions absent from the sample: 0, records 7
    assert "records 2" in text
