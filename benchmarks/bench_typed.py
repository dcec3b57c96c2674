"""Benchmark: the typed tables (``changes_``, ``current_``, ``tombstones_``, ``history_``) over a
files axis, against the raw Kafka→Delta passthrough of the same load.

Run from the repository root (``make bench`` runs its default; ``make scaling`` too)::

    .venv/bin/python benchmarks/bench_typed.py                       # files 1,2,10,50 x 2k, 20k
    .venv/bin/python benchmarks/bench_typed.py --files 2,50 --sizes 2000
    .venv/bin/python benchmarks/bench_typed.py --report .bench/typed-*.json   # one table

For each files count F one topic per batch size is loaded (``bench_pipeline``'s load mode, its
template's two subscriptions: COLOR in EBCDIC and EMPLOYEE in ASCII, one busy key each) with F
files in all — COLOR ceil(F/2) of them, EMPLOYEE floor(F/2); with F = 1 EMPLOYEE keeps one file
without a layout — every record on a file drawn at random among its subscription's files, so
every batch touches every file. Each of the F files has a format-buffer layout and
``history: true`` (COLOR ``deletes: remove``, so tombstones; EMPLOYEE ``deletes: mark``). The
load is the same for every F (transactions, seed): only how many files it spreads over moves.

Then, each in its own Spark driver process (``bench_pipeline.spawn_phase``): the raw
passthrough of the topic and the full pipeline with the typed tables. One row per (F, batch
size): batches, the steady batch (median after the first two) of both, their b/a, the
pipeline's steady transactions/s, the mean typed step per batch (``t_typed_ms``), and what the
typed tables hold at the end (rows of every ``current_`` and ``history_`` table). Then, per
size, the steady batch with the most files against the one with two files (the issue's goal: ≤ 3x).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.bench_pipeline import (  # noqa: E402
    BENCH_DIR,
    TEMPLATE,
    earlier_load,
    ensure_broker,
    load_topic,
    run_settings,
    spawn_phase,
    steady_ms,
    steady_tx_s,
    topic_messages,
)
from benchmarks.procmem import load_average  # noqa: E402

#: The layouts of the template's two subscriptions (conf/test.yaml's, the simulator's fields).
FORMAT_BUFFERS = {
    "COLOR": ("AA,16,A,AB,16,U.", {"AA": "color", "AB": "code"}, "remove"),
    "EMPLOYEE": ("AA,8,A,AC,20,A,AE,20,A,AH,4,P,AN,6,A,AS,5,P,2,AT,4,B,AO,30,A.",
                 {"AA": "personnel_id", "AC": "first_name", "AE": "name", "AH": "birth",
                  "AN": "phone", "AS": "salary", "AT": "bonus", "AO": "department"}, "mark"),
}
#: Each subscription's file numbers: its template file first, then numbers of its own.
FIRST_FILE = {"COLOR": 100, "EMPLOYEE": 200}
#: Transactions loaded per batch size: a few steady batches at each (make bench's sizes).
TRANSACTIONS = {2000: 50_000, 20000: 400_000}


def typed_sections(files: int) -> dict[str, Any]:
    """``subscriptions`` and ``layouts`` for ``files`` typed files over the template's two
    subscriptions (see the module doc)."""
    template = yaml.safe_load(TEMPLATE.read_text())["subscriptions"]
    share = {"COLOR": (files + 1) // 2, "EMPLOYEE": files // 2}
    subs, layouts = [], []
    for sub in template:
        name = sub["name"]
        fnrs = [FIRST_FILE[name] + i for i in range(max(1, share[name]))]
        subs.append({**sub, "files": fnrs})
        buffer, columns, deletes = FORMAT_BUFFERS[name]
        layouts += [{"subscription": name, "dbid": 10006, "fnr": fnr, "format_buffer": buffer,
                     "columns": columns, "deletes": deletes, "history": True}
                    for fnr in fnrs[:share[name]]]
    return {"subscriptions": subs, "layouts": layouts}


def one_row(files: int, size: int, transactions: int, reuse: str | None,
            timeout_s: float) -> dict[str, Any]:
    """Load (or reuse) the topic of F files at this size, run raw and typed; the row."""
    run = reuse or f"typed-{time.strftime('%Y%m%d-%H%M%S')}-f{files}-b{size}"
    settings, conf = run_settings(BENCH_DIR / "runs" / run, f"bench.{run}",
                                  stream={"max_offsets_per_trigger": size},
                                  sections=typed_sections(files))
    started = ensure_broker(settings)
    if reuse:
        load = earlier_load(reuse)
        clear_outputs(conf.parent)
    else:
        load = load_topic(settings, transactions, seed=1)
        (conf.parent / "load.json").write_text(json.dumps(load))
    expect = sum(topic_messages(settings).values())
    print(f"files {files}, {size} msgs/batch: topic of run {run}, {expect} messages, "
          f"{load['transactions']} transactions", flush=True)
    raw = spawn_phase("raw", conf, expect, timeout_s)
    typed = spawn_phase("pipeline", conf, expect, timeout_s)
    raw_ms, typed_ms = steady_ms(raw["batch_ms"]), steady_ms(typed["batch_ms"])
    laps = typed.get("sink", {}).get("laps_ms", {})
    return {"files": files, "batch": size, "run": run, "batches": typed["batches"],
            "raw_steady_ms": raw_ms, "typed_steady_ms": typed_ms,
            "ba_steady": raw_ms / typed_ms if raw_ms and typed_ms else None,
            "ba_window": raw["window_s"] / typed["window_s"],
            "steady_tx_s": steady_tx_s(conf.parent / "metrics.jsonl") if typed_ms else None,
            "typed_ms": laps.get("t_typed_ms"), "batch_ms": typed["batch_ms"],
            "raw_batch_ms": raw["batch_ms"], "landed": typed["landed_transactions"],
            "typed_rows": typed.get("typed_rows", {}), "quarantined": typed["quarantined"],
            "largest_worker_mb": typed["peak_memory_mb"]["largest_worker_mb"],
            "load_average": load_average(), "started_broker": started, "conf": str(conf)}


def clear_outputs(run_dir: Path) -> None:
    """An earlier run's lake, checkpoints and metrics gone, its conf and load kept: the
    phases of a reused topic start from offset 0 (a checkpoint left at the topic's end would
    wait for messages that never come)."""
    for path in run_dir.iterdir():
        if path.name in ("conf.yaml", "load.json"):
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| files | msgs/batch | batches | raw steady s | typed steady s | b/a steady "
            "| b/a window | tx/s (steady) | typed step s | largest worker MB |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]

    def sec(ms: float | None) -> str:
        return f"{ms / 1000:.1f}" if ms else "–"

    for r in rows:
        ba = f"{r['ba_steady']:.2f}" if r["ba_steady"] else "–"
        tx = f"{r['steady_tx_s']:,.0f}" if r["steady_tx_s"] else "–"
        lines.append(f"| {r['files']} | {r['batch']:,} | {r['batches']} | "
                     f"{sec(r['raw_steady_ms'])} | {sec(r['typed_steady_ms'])} | {ba} | "
                     f"{r['ba_window']:.2f} | {tx} | {sec(r['typed_ms'])} | "
                     f"{r['largest_worker_mb']:,.0f} |")
    return "\n".join(lines)


def file_ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Per size: the steady batch with the most files against the one with two (goal ≤ 3x)."""
    out = []
    for size in sorted({r["batch"] for r in rows}):
        by_files = {r["files"]: r["typed_steady_ms"] for r in rows if r["batch"] == size}
        most = max(by_files)
        if 2 in by_files and most > 2 and by_files[2] and by_files[most]:
            ratio = by_files[most] / by_files[2]
            verdict = "meets" if ratio <= 3 else "MISSES"
            out.append(f"{size:,} msgs/batch: {most} files {by_files[most] / 1000:.1f} s, "
                       f"2 files {by_files[2] / 1000:.1f} s per steady batch = {ratio:.2f}x "
                       f"— {verdict} the goal of ≤ 3x")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", default="1,2,10,50", help="typed files per run (the axis)")
    p.add_argument("--sizes", default="2000,20000", help="messages per batch")
    p.add_argument("--transactions", type=int,
                   help="per topic (default: 50,000 at 2,000 msgs/batch, else 400,000)")
    p.add_argument("--reuse", default="",
                   help="FILES:SIZE=RUN,… topics loaded by earlier runs (.bench/runs/RUN)")
    p.add_argument("--timeout", type=float, default=3600.0, help="per phase, seconds")
    p.add_argument("--report", nargs="+", metavar="JSON",
                   help="print the table of rows saved by earlier runs (.bench/typed-*.json) "
                        "and run nothing: one run per (files, size) keeps each under the "
                        "Spark lock for minutes, not an hour")
    args = p.parse_args(argv)
    if args.report:
        saved = [row for path in args.report for row in json.loads(Path(path).read_text())]
        print(table(saved))
        for line in file_ratios(saved):
            print(line)
        return 0
    reuse = dict(item.split("=") for item in args.reuse.split(",") if item)
    rows: list[dict[str, Any]] = []
    for size in map(int, args.sizes.split(",")):
        for files in map(int, args.files.split(",")):
            transactions = args.transactions or TRANSACTIONS.get(size, 400_000)
            rows.append(one_row(files, size, transactions, reuse.get(f"{files}:{size}"),
                                args.timeout))
            print(json.dumps(rows[-1]), flush=True)
    print("\n== Typed tables over a files axis (each file: a layout, history on) ==\n"
          + table(rows))
    for line in file_ratios(rows):
        print(line)
    saved = BENCH_DIR / f"typed-{time.strftime('%Y%m%d-%H%M%S')}.json"
    saved.write_text(json.dumps(rows, indent=1))
    print(f"rows saved in {saved.relative_to(ROOT)} (--report takes them)")
    if any(r["started_broker"] for r in rows):
        from devtools import broker
        from pipeline.config import load_settings

        print(broker.stop(load_settings(Path(rows[-1]["conf"]), env={})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
