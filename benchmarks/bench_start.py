"""Benchmark: what a start of the job costs before its query runs, in a fresh JVM each time.

Run from the repository root (starts its own Spark; no broker needed)::

    .venv/bin/python benchmarks/bench_start.py              # 3 restarts
    .venv/bin/python benchmarks/bench_start.py --restarts 5

A lake with conf/test.yaml's two layouts (the job's twelve tables and each layout's typed
ones) is made by the first start; every further start is a restart on that lake, which
changes nothing. Each start is a new Python process with its own Spark JVM, as
``jobs/stream.py`` is, and times the steps of ``pipeline.spark.engine.query.start_stream``:
the session, the job's tables (``ensure_tables``), the typed tables (``reconcile_tables``), the
catalog, the checkpoint's app id and lanes, the plan. The query itself is not started (that
needs a broker); its first batch is the job's, not the start's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

STEPS = ("session", "tables", "typed", "catalog", "checkpoint", "plan")


def one_start(conf: Path) -> dict[str, float]:
    """The steps of one start, in this (fresh) process: seconds each."""
    from pipeline.config import load_settings
    from pipeline.spark.engine import query
    from pipeline.spark.engine.session import build_session

    settings = load_settings(conf, env={})
    took: dict[str, float] = {}
    mark = time.monotonic()

    def step(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        took[name] = now - mark
        mark = now

    spark = build_session(settings)
    step("session")
    query.ensure_tables(spark, settings)
    step("tables")
    query.reconcile_tables(spark, settings)
    step("typed")
    list(query.publish(spark, settings))
    step("catalog")
    checkpoint = settings.location(settings.stream.checkpoint_dir)
    query.checkpoint_app_id(spark, checkpoint)
    lanes = query.checkpoint_lanes(spark, settings, checkpoint)
    step("checkpoint")
    query.build_plan(spark, settings, lanes)
    step("plan")
    spark.stop()
    return took


def _conf(folder: Path) -> Path:
    """conf/test.yaml with its lake and checkpoint in ``folder``."""
    import yaml

    raw = yaml.safe_load((ROOT / "conf" / "test.yaml").read_text())
    raw["stream"].update(lake_dir=str(folder / "lake"), checkpoint_dir=str(folder / "ck"))
    raw["spark"]["jars_dir"] = str(ROOT / ".jars" / "spark")  # conf paths: from the file
    conf = folder / "conf.yaml"
    conf.write_text(yaml.safe_dump(raw))
    return conf


def _run(conf: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--one", str(conf)], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"a start failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child: one start
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_start(args.one)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        conf = _conf(Path(tmp))
        runs = [("fresh lake", _run(conf))]
        runs += [(f"restart {i + 1}", _run(conf)) for i in range(args.restarts)]
    print(f"{'start':<12}" + "".join(f"{s:>11}" for s in (*STEPS, "total")))
    for name, took in runs:
        cells = [took[s] for s in STEPS]
        print(f"{name:<12}" + "".join(f"{v:>10.2f}s" for v in (*cells, sum(cells))))
    again = [t for _, t in runs[1:]]
    if again:
        checks = statistics.median(t["tables"] + t["typed"] for t in again)
        print(f"restart median {statistics.median(sum(t.values()) for t in again):.2f} s, "
              f"of which the tables' checks {checks:.2f} s")


if __name__ == "__main__":
    main()
