"""Scaling table: how the full pipeline's cost grows with batch size and with busy keys.

Run from the repository root (not part of CI; ~40 minutes on the 2-core machine)::

    .venv/bin/python benchmarks/scaling.py                          # 2k/5k/20k/50k x 1/2/8 keys
    .venv/bin/python benchmarks/scaling.py --sizes 2000,20000 --keys 2 --transactions 100000

For each key count one topic is loaded once (``bench_pipeline``'s load mode: ``--transactions``
over that many subscriptions of one destination); then for each batch size
(``max_offsets_per_trigger``) the full pipeline runs from ``earliest`` in a fresh driver
process (``bench_pipeline``'s ``pipeline`` phase, its own lake and checkpoint). One row per
(keys, batch size): batches, the window's transactions/s, the steady batch (median after the
first two) and its transactions/s, the peak memory of the Python workers (all, and the
largest: the state task of the busiest key). Where a size leaves fewer than three batches
there is no steady figure: the window rate includes the first batch's warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import (  # noqa: E402
    BENCH_DIR,
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


def one_row(keys: int, size: int, topics: str, load: dict[str, Any],
            expect: int, timeout_s: float) -> dict[str, Any]:
    run = f"scale-{time.strftime('%Y%m%d-%H%M%S')}-k{keys}-b{size}"
    _, conf = run_settings(BENCH_DIR / "runs" / run, topics, subscriptions=keys,
                           stream={"max_offsets_per_trigger": size})
    res = spawn_phase("pipeline", conf, expect, timeout_s)
    steady = steady_ms(res["batch_ms"])
    mem = res["peak_memory_mb"]
    return {"keys": keys, "batch": size, "batches": res["batches"],
            "window_tx_s": load["transactions"] / res["window_s"],
            "steady_batch_ms": steady,
            "steady_tx_s": steady_tx_s(conf.parent / "metrics.jsonl") if steady else None,
            "workers_mb": mem["python_workers_mb"], "largest_mb": mem["largest_worker_mb"],
            "landed": res["landed_transactions"], "load_average": load_average()}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| keys | msgs/batch | batches | tx/s (window) | steady batch s | tx/s (steady) "
            "| Python workers MB | largest MB |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        steady = f"{r['steady_batch_ms'] / 1000:.1f}" if r["steady_batch_ms"] else "–"
        tx = f"{r['steady_tx_s']:,.0f}" if r["steady_tx_s"] else "–"
        lines.append(f"| {r['keys']} | {r['batch']:,} | {r['batches']} | "
                     f"{r['window_tx_s']:,.0f} | {steady} | {tx} | {r['workers_mb']:,.0f} | "
                     f"{r['largest_mb']:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,5000,20000,50000", help="messages per batch")
    p.add_argument("--keys", default="1,2,8", help="busy keys (subscriptions)")
    p.add_argument("--transactions", type=int, default=400_000, help="per topic")
    p.add_argument("--reuse", default="", help="KEYS=RUN,… topics loaded by earlier runs")
    p.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    args = p.parse_args(argv)
    reuse = dict(item.split("=") for item in args.reuse.split(",") if item)
    rows: list[dict[str, Any]] = []
    started_broker = False
    for keys in map(int, args.keys.split(",")):
        load_run = reuse.get(str(keys)) or f"scale-load-{time.strftime('%Y%m%d-%H%M%S')}-k{keys}"
        topics = f"bench.{load_run}"
        settings, conf = run_settings(BENCH_DIR / "runs" / load_run, topics,
                                      subscriptions=keys)
        started_broker = ensure_broker(settings) or started_broker
        if str(keys) in reuse:
            load = earlier_load(load_run)
        else:
            load = load_topic(settings, args.transactions, seed=1)
            (conf.parent / "load.json").write_text(json.dumps(load))
        expect = sum(topic_messages(settings).values())
        print(f"keys {keys}: topic of run {load_run}, {expect} messages, "
              f"{load['transactions']} transactions", flush=True)
        for size in map(int, args.sizes.split(",")):
            rows.append(one_row(keys, size, topics, load, expect, args.timeout))
            print(json.dumps(rows[-1]), flush=True)
    print("\n== Scaling (full pipeline) ==\n" + table(rows))
    if started_broker:
        from devtools import broker

        print(broker.stop(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
