"""Soak run: the job under steady load with faults for ≥10 minutes; is state and memory flat?

Not part of CI (``make soak``). Run from the repository root::

    .venv/bin/python benchmarks/soak.py                      # 11 minutes at 100 tx/s
    .venv/bin/python benchmarks/soak.py --minutes 30 --rate 200

One run: the bench broker (benchmarks/bench.yaml, 127.0.0.1:29092), fresh topics, the
simulator as a separate process (``python -m devtools.sim --serve``) producing at a steady rate
with fault rates (lost transactions, lost continuations, duplicates, corrupt messages, rare
replicator restarts) and answering the job's TRAN requests, and the job itself in this process
(``start_stream``). Every ``--sample`` seconds one row: state rows and state memory (the metrics
JSONL's stateOperators figures), driver JVM / driver Python / Python worker RSS (/proc), mean
batch duration, Kafka lag (latest − processed offsets from the query's progress). At the end a
table and a verdict: a least-squares slope of each series after the warm-up, projected over
10 minutes against its mean — flat when the projection stays under the threshold.

Why slopes and not peaks: the JVM grows for a while after start (JIT, heap sizing, RocksDB
caches) and Python workers are recycled; a leak shows as a steady climb after warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import BENCH_DIR, ensure_broker, run_settings  # noqa: E402
from benchmarks.procmem import load_average, sample_tree  # noqa: E402
from pipeline.config import Settings  # noqa: E402

DEFAULT_FAULTS = {"drop_transaction": 0.001, "drop_continuation": 0.0005, "duplicate": 0.002,
                  "corrupt": 0.0005, "restart": 0.00003}
FLAT_PCT = 10.0  # projected growth over 10 minutes, in % of the series' mean


@dataclass
class Sample:
    """One row of the soak table."""

    t_s: float
    batches: int
    messages: int
    transactions: int
    state_rows: int
    state_mb: float
    jvm_mb: float
    live_mb: float  # driver JVM heap in use after a full GC: what a leak grows
    python_mb: float
    workers_mb: float
    batch_ms: float
    lag: int
    open_gaps: int
    load1: float


# -- the simulator process --------------------------------------------------------------------


def start_simulator(conf: Path, settings: Settings, rate: float, seconds: float,
                    faults: dict[str, float], log: Path) -> subprocess.Popen:
    """``python -m devtools.sim`` at a steady rate, serving requests until interrupted."""
    cmd = [sys.executable, "-m", "devtools.sim", "--kafka", settings.kafka.bootstrap_servers,
           "--settings", str(conf), "--transactions", "0", "--duration", str(seconds),
           "--rate", str(rate), "--serve", "--linger", "-1", "--json", "--seed", "11",
           "--request-group", f"soak-{conf.parent.name}"]
    for kind, p in faults.items():
        cmd += ["--fault-rate", f"{kind}={p}"]
    out = log.open("w")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def stop_simulator(proc: subprocess.Popen, log: Path) -> dict[str, Any]:
    """SIGINT (it flushes and sends TERM), then its final JSON count."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


# -- sampling ---------------------------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kafka_lag(query: Any) -> int:
    """Messages Kafka had that the last batch had not read (latest − end offsets)."""
    progress = query.lastProgress
    if not progress:
        return -1
    lag = 0
    for source in progress.get("sources", []):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        end = json.loads(end) if isinstance(end, str) else (end or {})
        latest = json.loads(latest) if isinstance(latest, str) else (latest or {})
        for topic, parts in latest.items():
            for part, offset in parts.items():
                lag += int(offset) - int(end.get(topic, {}).get(part, 0))
    return lag


def live_heap_mb(spark: Any) -> float:
    """The driver JVM's live heap in MB: heap in use right after a full collection.

    RSS cannot tell a leak from a heap that is simply allowed to fill up to -Xmx (it does, and
    then stays there); the live set a full GC leaves behind can. The collection costs a short
    pause of the driver once per sample, which a soak (a measurement, not production) accepts.
    """
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    usage = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    return int(usage.getUsed()) / 1e6


def take_sample(t_s: float, records: list[dict[str, Any]], seen: int, query: Any,
                spark: Any) -> Sample:
    """Totals so far, the newest state figures, and the batches since the previous sample."""
    window = records[seen:] or records[-1:]
    last = records[-1] if records else {}
    mem = sample_tree(os.getpid())
    durations = [r["duration_ms"] for r in window]
    return Sample(
        t_s=t_s, batches=len(records), messages=sum(r["messages"] for r in records),
        transactions=sum(r.get("transactions", 0) for r in records),
        state_rows=int(last.get("state_rows", 0)),
        state_mb=last.get("state_memory_bytes", 0) / 1e6, jvm_mb=mem.driver_jvm_mb,
        live_mb=live_heap_mb(spark),
        python_mb=mem.driver_python_mb, workers_mb=mem.python_workers_mb,
        batch_ms=sum(durations) / len(durations) if durations else 0.0, lag=kafka_lag(query),
        open_gaps=int(last.get("open_gaps", 0)), load1=os.getloadavg()[0])


def print_row(s: Sample) -> None:
    print(f"{s.t_s:6.0f} {s.batches:7} {s.messages:8} {s.transactions:8} {s.state_rows:6} "
          f"{s.state_mb:8.2f} {s.jvm_mb:7.0f} {s.live_mb:7.0f} {s.python_mb:6.0f} "
          f"{s.workers_mb:7.0f} "
          f"{s.batch_ms:8.0f} {s.lag:6} {s.open_gaps:5} {s.load1:5.1f}", flush=True)


HEADER = (f"{'t s':>6} {'batches':>7} {'msgs':>8} {'tx':>8} {'state':>6} {'state MB':>8} "
          f"{'JVM MB':>7} {'live MB':>7} {'py MB':>6} {'wrk MB':>7} {'batch ms':>8} "
          f"{'lag':>6} {'gaps':>5} "
          f"{'load':>5}")


# -- verdict ----------------------------------------------------------------------------------


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def verdict(samples: list[Sample], warmup_fraction: float = 0.2) -> list[tuple[str, str, bool]]:
    """Per series: (name, '+x.x% per 10 min (slope …)', flat?) after the warm-up."""
    keep = samples[int(len(samples) * warmup_fraction):]
    xs = [s.t_s for s in keep]
    out = []
    for name in ("state_rows", "state_mb", "jvm_mb", "live_mb", "python_mb", "workers_mb"):
        ys = [float(getattr(s, name)) for s in keep]
        mean = sum(ys) / len(ys) if ys else 0.0
        per10 = slope(xs, ys) * 600
        pct = 100 * per10 / mean if mean else 0.0
        # Tiny series (a handful of state rows) are flat when the change is under one unit.
        flat = abs(pct) < FLAT_PCT or abs(per10) < 1.0
        out.append((name, f"{per10:+.2f} per 10 min ({pct:+.1f}% of mean {mean:.1f})", flat))
    return out


# -- the run ----------------------------------------------------------------------------------


def landed_summary(spark: Any, settings: Settings) -> dict[str, Any]:
    """Transactions landed, duplicates and quarantined rows, and the gaps' final states."""
    from devtools.demo import LATEST_GAPS
    from pipeline.spark.land.tables import table_path

    def count(table: str) -> int:
        return spark.read.format("delta").load(table_path(settings, table)).count()

    gaps = spark.sql(LATEST_GAPS.format(path=table_path(settings, "gaps")))
    states = {r["state"]: r["count"] for r in gaps.groupBy("state").count().collect()}
    return {"transactions": count("transactions"), "duplicates": count("duplicates"),
            "quarantine": count("quarantine"), "requests": count("requests"),
            "gap_states": states}


def run(args: argparse.Namespace) -> int:
    from pipeline.ops.metrics import job_metrics
    from pipeline.spark.engine.drain import await_idle, stop_between_batches
    from pipeline.spark.engine.query import start_stream
    from pipeline.spark.engine.session import build_session

    run_id = time.strftime("%Y%m%d-%H%M%S")
    run_dir = BENCH_DIR / "soak" / run_id
    settings, conf = run_settings(run_dir, f"soak.{run_id}",
                                  stream={"trigger_interval": args.trigger})
    seconds = args.minutes * 60
    print(f"soak {run_id}: {args.minutes} min at {args.rate} tx/s, faults {DEFAULT_FAULTS}, "
          f"trigger {args.trigger}, max_offsets_per_trigger "
          f"{settings.stream.max_offsets_per_trigger}; load average {load_average()}",
          flush=True)
    started_broker = ensure_broker(settings)
    spark = build_session(settings)
    query = start_stream(spark, settings, observe=job_metrics)
    sim_log = run_dir / "simulator.log"
    sim = start_simulator(conf, settings, args.rate, seconds, DEFAULT_FAULTS, sim_log)
    metrics = Path(settings.location(settings.stream.metrics_file))
    samples: list[Sample] = []
    t0 = time.monotonic()
    seen = 0
    print(HEADER, flush=True)
    try:
        while (elapsed := time.monotonic() - t0) < seconds:
            time.sleep(min(args.sample, max(0.0, seconds - elapsed)))
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            records = read_records(metrics)
            samples.append(take_sample(time.monotonic() - t0, records, seen, query, spark))
            seen = len(records)
            print_row(samples[-1])
        sent = stop_simulator(sim, sim_log)
        drain_started = time.monotonic()
        try:
            await_idle(query, timeout_s=args.drain_timeout)
            print(f"caught up {time.monotonic() - drain_started:.0f} s after the load ended")
        except TimeoutError as exc:  # still report what was measured: lag is a finding
            print(f"NOT caught up after the load ended: {exc}")
    finally:
        if sim.poll() is None:
            stop_simulator(sim, sim_log)
        stop_between_batches(query)  # not mid-batch: no interrupted-thread trace in the log
    landed = landed_summary(spark, settings)
    spark.stop()
    report(samples, sent, landed, run_dir)
    if started_broker and not args.keep_broker:
        from devtools import broker

        print(broker.stop(settings))
    return 0


def report(samples: list[Sample], sent: dict[str, Any], landed: dict[str, Any],
           run_dir: Path) -> None:
    print(f"\nsimulator sent: {sent}")
    print(f"landed: {landed}")
    results = verdict(samples)
    print("\nslopes after the first 20% (warm-up) of the samples:")
    for name, text, flat in results:
        print(f"  {name:11} {text}  {'flat' if flat else 'GROWING'}")
    state_flat = all(flat for name, _t, flat in results if name.startswith("state"))
    memory_flat = all(flat for name, _t, flat in results if name.endswith("_mb")
                      and not name.startswith("state"))
    print(f"verdict: state {'flat' if state_flat else 'NOT flat'}; memory "
          f"{'flat' if memory_flat else 'NOT flat'} (threshold {FLAT_PCT:.0f}% per 10 min)")
    (run_dir / "soak.json").write_text(json.dumps(
        {"samples": [asdict(s) for s in samples], "sent": sent, "landed": landed,
         "verdict": results}, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=11.0, help="load duration (≥10 for a soak)")
    p.add_argument("--rate", type=float, default=100.0, help="transactions per second")
    p.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--trigger", default="5 seconds", help="stream.trigger_interval")
    p.add_argument("--drain-timeout", type=float, default=600.0,
                   help="seconds to catch up after the load ends")
    p.add_argument("--keep-broker", action="store_true", help="leave the bench broker running")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
