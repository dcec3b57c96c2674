"""Where a lake soak's batch time went, per window of batches (benchmarks/lake_soak.py).

Run from the repository root on one or more finished (or running) soak runs::

    .venv/bin/python benchmarks/lake_soak_report.py .bench/lake_soak/<run> [<run> ...]

Per phase found in each run: the samples the soak printed (files per bulk table, Delta log
MB, the two analyst queries), then per window of ``--window`` batches the mean batch time and
its parts from the job's metrics JSONL (the Delta commits ``t_delta_ms``, Kafka read + decode +
state ``t_state_ms``, the stream's own WAL commit), the commit-to-landed latency p50, and the
maintenance rounds in the window (how many batches compacted, the longest pause), and at the
end the files each bulk table's ``_delta_log`` holds. Reads files only: no Spark, no broker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.soak import read_records  # noqa: E402
from pipeline.spark.land.tables import DIRECT_TABLES  # noqa: E402


@dataclass(frozen=True)
class Window:
    """Means over batches ``first``..``last`` of one phase (milliseconds)."""

    first: int
    last: int
    batch_ms: float
    delta_ms: float
    state_ms: float
    wal_ms: float
    landed_p50_s: float | None
    maintain_batches: int
    maintain_max_ms: int
    compacted: int
    skipped: int


def windows(records: list[dict[str, Any]], size: int) -> list[Window]:
    """The metrics records (one per batch, in batch order) in windows of ``size`` batches."""
    out = []
    for start in range(0, len(records), size):
        part = records[start:start + size]
        counts = [r.get("counts", {}) for r in part]
        maintain = [int(c.get("t_maintain_ms", 0)) for c in counts]
        p50s = [r["latency_s"]["commit_to_landed"]["p50"] for r in part
                if (r.get("latency_s") or {}).get("commit_to_landed")]
        out.append(Window(
            first=int(part[0]["batch_id"]), last=int(part[-1]["batch_id"]),
            batch_ms=statistics.fmean(int(r["duration_ms"]) for r in part),
            delta_ms=statistics.fmean(int(c.get("t_delta_ms", 0)) for c in counts),
            state_ms=statistics.fmean(int(c.get("t_state_ms", 0)) for c in counts),
            wal_ms=statistics.fmean(int(r.get("durations_ms", {}).get("walCommit", 0))
                                    for r in part),
            landed_p50_s=statistics.median(p50s) if p50s else None,
            maintain_batches=sum(1 for m in maintain if m > 0),
            maintain_max_ms=max(maintain, default=0),
            compacted=sum(int(c.get("maint_compacted", 0)) for c in counts),
            skipped=sum(int(c.get("maint_skipped", 0)) for c in counts)))
    return out


WINDOW_HEADER = ("| batches | batch ms | Delta ms | state ms | WAL ms | landed p50 s "
                 "| maintenance batches | longest pause ms | compacted | skipped |\n"
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def window_row(w: Window) -> str:
    p50 = f"{w.landed_p50_s:.2f}" if w.landed_p50_s is not None else "-"
    return (f"| {w.first:,}-{w.last:,} | {w.batch_ms:,.0f} | {w.delta_ms:,.0f} "
            f"| {w.state_ms:,.0f} | {w.wal_ms:,.0f} | {p50} | {w.maintain_batches} "
            f"| {w.maintain_max_ms:,} | {w.compacted} | {w.skipped} |")


SAMPLE_HEADER = ("| batches | " + " | ".join(DIRECT_TABLES) + " | Delta logs MB "
                 "| records by fnr s | one ISN's history s |\n"
                 "|---:|" + "---:|" * (len(DIRECT_TABLES) + 3))


def sample_row(s: dict[str, Any]) -> str:
    files = " | ".join(f"{s['files'].get(t, 0):,}" for t in DIRECT_TABLES)
    return (f"| {s['batches']:,} | {files} | {s['log_mb']:.1f} | {s['count_by_fnr_s']:.2f} "
            f"| {s['isn_history_s']:.2f} |")


def log_files(lake: Path) -> dict[str, int]:
    """Files in each bulk table's ``_delta_log`` (commits, checksums, checkpoints)."""
    return {t: sum(1 for f in (lake / t / "_delta_log").glob("*") if f.is_file())
            for t in DIRECT_TABLES if (lake / t).is_dir()}


def report(run: Path, window: int) -> list[str]:
    """The report lines of every phase in one soak run directory."""
    lines: list[str] = []
    saved = run / "lake_soak.json"
    samples = json.loads(saved.read_text())["samples"] if saved.exists() else []
    for phase_dir in sorted(p for p in run.iterdir() if (p / "metrics.jsonl").exists()):
        phase = phase_dir.name
        records = read_records(phase_dir / "metrics.jsonl")
        lines += [f"## {run.name} phase {phase}: {len(records):,} batches", ""]
        mine = [s for s in samples if s["phase"] == phase]
        if mine:
            lines += [SAMPLE_HEADER] + [sample_row(s) for s in mine] + [""]
        lines += [WINDOW_HEADER] + [window_row(w) for w in windows(records, window)] + [""]
        files = log_files(phase_dir / "lake")
        lines += ["files in _delta_log: " + ", ".join(f"{t} {n:,}" for t, n in files.items()),
                  ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="soak run directories")
    p.add_argument("--window", type=int, default=200, help="batches per window")
    args = p.parse_args(argv)
    for run in args.runs:
        print("\n".join(report(run, args.window)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
