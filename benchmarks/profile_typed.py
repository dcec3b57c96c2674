"""Re-land one batch's typed tables offline, file by file: where a typed task's time goes.

Run from the repository root, after a ``bench_typed.py`` run (one process, no Spark)::

    .venv/bin/python benchmarks/profile_typed.py .bench/runs/typed-…-f2-b20000 3
    .venv/bin/python benchmarks/profile_typed.py .bench/runs/typed-…-f2-b20000 3 --profile
    .venv/bin/python benchmarks/profile_typed.py .bench/runs/typed-…-f2-b20000 2 --batches 3

The run's lake is copied to a temporary folder. Its typed tables are rolled back to before
the batch by dropping their later commits: table version ``v`` holds batch ``v - 1``, and the
bench's tables have no checkpoint that soon. The batch's rows are the Parquet files that the
raw ``transactions``, ``records`` and ``images`` tables added in that batch's commit. The
configured files are planned as the job plans them (``direct._tasks``: one share per core),
without GFFT versions or refresh cutoffs. Each share is landed by ``file_writer.land_work``
in this process, one after the other, so the shares do not compete for the cores as the
job's tasks do. A share's first file also pays the process's imports.

Printed per file: the phase times (``FileResult.times_ms``; changes, current and history
overlap, decision 0021), the rows per table, and the share's wall time. With ``--profile``
each share's functions by own time (threads' work shows as lock waits).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from pipeline.config import load_settings  # noqa: E402
from pipeline.spark.typed.direct import RAW_INPUTS, _share, _tasks, file_plan  # noqa: E402
from pipeline.spark.typed.file_writer import TypedWork, land_work  # noqa: E402
from pipeline.spark.typed.tables import decode_spec  # noqa: E402

TYPED_KINDS = ("changes", "current", "history", "tombstones")


def _log(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def roll_back(lake: Path, batch: int) -> list[Path]:
    """Drop the typed tables' commits from the batch on (version > batch); the tables."""
    tables = [t for t in lake.iterdir() if t.name.split("_")[0] in TYPED_KINDS]
    for table in tables:
        log = table / "_delta_log"
        if (log / "_last_checkpoint").exists():
            sys.exit(f"{table.name} has a checkpoint: roll it back by hand")
        for entry in log.iterdir():
            if entry.suffix in (".json", ".crc") and entry.stem.isdigit() and (
                    int(entry.stem) > batch):
                entry.unlink()
    return tables


def batch_inputs(lake: Path, batch: int) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The data files each raw input table added in the batch's commit (version batch+1)."""
    out = {}
    for name in RAW_INPUTS:
        lines = _log(lake / name, batch + 1).read_text().splitlines()
        adds = [json.loads(line)["add"] for line in lines if line.startswith('{"add"')]
        out[name] = [(str(lake / name / add["path"]), ()) for add in adds]
    return out


def app_id(table: Path) -> str:
    """The job's app id, from the table's first landed commit (``<app>-<table>``)."""
    for line in _log(table, 1).read_text().splitlines():
        if '"txn"' in line:
            return str(json.loads(line)["txn"]["appId"]).removesuffix(f"-{table.name}")
    sys.exit(f"{table.name}: no txn in its first landed commit")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a bench_typed run folder (.bench/runs/typed-…)")
    p.add_argument("batch", type=int, help="the batch to land again (from 1)")
    p.add_argument("--batches", type=int, default=1,
                   help="land this many batches from BATCH on, one after the other in the "
                        "one process (the first pays the process's warm-up: imports, Arrow's "
                        "first kernels, delta-rs's first table loads, as a job's first batch)")
    p.add_argument("--profile", action="store_true", help="cProfile each share")
    args = p.parse_args()
    run = args.run.resolve()
    with tempfile.TemporaryDirectory(prefix="profile-typed-") as tmp:
        lake = Path(tmp) / "lake"
        shutil.copytree(run / "lake", lake)
        tables = roll_back(lake, args.batch)
        conf = Path(tmp) / "conf.yaml"
        conf.write_text((run / "conf.yaml").read_text().replace(str(run / "lake"), str(lake)))
        settings = load_settings(conf, env={})
        plans = [file_plan(settings, lay, decode_spec(settings, lay), ())
                 for lay in settings.layouts]
        app = app_id(tables[0])
        for batch in range(args.batch, args.batch + args.batches):
            print(f"batch {batch}")
            inputs = batch_inputs(lake, batch)
            for share in _tasks(plans, 2):
                work = TypedWork(tuple(share), _share(inputs, share), batch, app)
                land(work, args.profile)


def land(work: TypedWork, profile: bool) -> None:
    profiler = cProfile.Profile() if profile else None
    started, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    results: list[Any] = list(land_work(work))
    if profiler:
        profiler.disable()
    wall = (time.perf_counter() - started) * 1000
    cpu = (time.process_time() - cpu) * 1000
    for r in results:
        phases = ", ".join(f"{k} {v:,.0f}" for k, v in r.times_ms.items())
        print(f"{'/'.join(map(str, r.key))}: {r.records:,} records; ms: {phases}; "
              f"rows {r.counts}")
    print(f"share of {len(work.plans)} files: {wall:,.0f} ms, CPU {cpu:,.0f} ms (all threads)")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
