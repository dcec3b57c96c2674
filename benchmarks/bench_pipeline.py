"""Benchmark: the full pipeline against a raw Spark Kafka→Delta passthrough of the same topic.

Run from the repository root (``make bench`` runs the codec benchmark, then this)::

    .venv/bin/python benchmarks/bench_pipeline.py                    # 50,000 transactions
    .venv/bin/python benchmarks/bench_pipeline.py --transactions 20000 --max-offsets 1000

What one run does, on this machine:

1. starts the bench broker (benchmarks/bench.yaml: 127.0.0.1:29092, data in .bench/kafka, so it
   never meets the demo's or the tests' broker) and creates fresh topics for this run;
2. loads the output topic with the simulator's load mode, flat out, with the simulator's
   realistic mix (COLOR in EBCDIC/big-endian, EMPLOYEE in ASCII/little-endian, 1-8 records per
   transaction with before and after images, 32 KB messages packed the way the replicator
   packs them, an occasional C5 status), wall-clock stamps;
3. measures, each in its own Spark driver process (so each phase's peak memory is its own and
   neither warms the other's JVM), from ``earliest`` until every message is processed:
   (a) ``raw``: Spark's Kafka source straight into one Delta table, binary values, no decoding;
   (b) ``pipeline``: ``start_stream`` — decode, reassembly with state, the job's Delta tables
       (the bulk ones from the state tasks' own files, ``stream.raw_writer``);
4. prints messages/s, transactions/s, MB/s, p50/p99 end-to-end latency, peak memory (driver
   JVM, driver Python, Python workers; /proc RSS), the per-batch time breakdown, the ratio b/a
   (goal ≥ 0.5) and the codec's ratio to adapya-era.

The data is loaded before either query starts, so both read a backlog: throughput is the
catch-up rate, and the latency figures are dominated by how long a message waited in Kafka —
comparable between (a) and (b), not a steady-state latency (see benchmarks/soak.py for that).
Generated data lives under .bench/ (git-ignored): a run's conf, load, metrics and results stay
in .bench/runs/RUN, its lakes and checkpoints are removed when it ends (``--keep-lake`` keeps
them); the broker is stopped at the end if this run started it (``--keep-broker`` leaves it
up).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.procmem import PeakSampler, TreeMemory, load_average  # noqa: E402
from pipeline.config import Settings, load_settings  # noqa: E402
from pipeline.spark.land.datafiles import writer_mode  # noqa: E402

TEMPLATE = ROOT / "benchmarks" / "bench.yaml"
BENCH_DIR = ROOT / ".bench"
RESULT_PREFIX = "BENCH-RESULT "
PHASES = ("raw", "pipeline")
DURATION_KEYS = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
                 "commitOffsets", "triggerExecution")


# -- settings -------------------------------------------------------------------------------


def run_settings(run_dir: Path, prefix: str, *, template: Path = TEMPLATE,
                 stream: dict[str, Any] | None = None,
                 subscriptions: int | None = None,
                 sections: dict[str, Any] | None = None,
                 spark: dict[str, Any] | None = None) -> tuple[Settings, Path]:
    """A conf for one run: fresh topics, lake/checkpoints/metrics under ``run_dir``;
    ``subscriptions``: N keys — 1 keeps the template's first (one busy key, issue 17's
    single-key mode: every transaction on one state task), 2 both, more adds subscriptions
    of the ORDERS layout on files of their own, the forms alternating (the scaling table);
    ``sections``: top-level conf sections that replace the template's (the typed bench's
    ``subscriptions`` and ``layouts``, benchmarks/bench_typed.py); ``spark``: settings of the
    template's ``spark`` section overridden (its ``conf`` added to the template's).

    Written to ``run_dir/conf.yaml`` so the Spark phases (separate processes) and anyone
    re-running a query by hand read exactly the same settings.
    """
    raw = yaml.safe_load(template.read_text())
    raw["topics"] = {"outputs": {f"{prefix}.out1": "OUT1"}, "replies": f"{prefix}.replies",
                     "requests": f"{prefix}.requests", "alerts": f"{prefix}.alerts"}
    raw["stream"].update(lake_dir=str(run_dir / "lake"), checkpoint_dir=str(run_dir / "ck"),
                         metrics_file=str(run_dir / "metrics.jsonl"), **(stream or {}))
    raw["base_dir"] = str(ROOT)
    spark = dict(spark or {})
    section = raw.setdefault("spark", {})
    section.setdefault("conf", {}).update(spark.pop("conf", {}))  # added to the template's
    section.update(spark)
    if subscriptions is not None:
        raw["subscriptions"] = _subscriptions(raw["subscriptions"], subscriptions)
    raw.update(sections or {})
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "conf.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_settings(path, env={}), path


def _subscriptions(template: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The template's first ``n`` subscriptions, then ORDERS ones (files 21, 22 …)."""
    extra = [{"name": f"ORDERS{i}", "destinations": template[0]["destinations"],
              "files": [20 + i], "ebcdic": i % 2 == 1}
             for i in range(1, n - len(template) + 1)]
    return (template + extra)[:n]


def throughput_settings(settings: Settings) -> dict[str, Any]:
    """The settings that decide throughput, printed with the figures."""
    st = settings.stream
    return {"max_offsets_per_trigger": st.max_offsets_per_trigger,
            "trigger_interval": st.trigger_interval,
            "shuffle_partitions": st.shuffle_partitions,
            "source_records_per_task": st.source_records_per_task,
            "raw_writer": writer_mode(settings), "state_api": st.state_api,
            # the broker makes the topics the job reads with one partition (topic_check.py)
            "source_topic_partitions": 1,
            "master": settings.spark.master, "driver_memory": settings.spark.driver_memory,
            "local_file_system": settings.spark.local_file_system}


# -- broker and load ------------------------------------------------------------------------


def ensure_broker(settings: Settings) -> bool:
    """Start the bench broker unless it runs; True if this run started it."""
    from devtools import broker

    was_running = broker._running_pid(settings) is not None
    for attempt in range(3):
        try:
            print(broker.start(settings), flush=True)
            break
        except broker.BrokerError as exc:
            # broker.py draws a random cluster id that may start with '-', which kafka-storage
            # takes for an option (1 run in 64): a fresh draw fixes it.
            if "--cluster-id" not in str(exc) or attempt == 2:
                raise
    return not was_running


def load_topic(settings: Settings, transactions: int, seed: int,
               max_records: int | None = None) -> dict[str, Any]:
    """Fill the output topic flat out with the simulator's load mode; returns its summary.
    ``max_records``: records per transaction at most (the simulator's mix: 1-8)."""
    from devtools.sim import LoadOptions, Replicator, drive
    from devtools.sim.clock import WallClock
    from devtools.sim.config import from_settings
    from devtools.sim.sinks import KafkaSink

    config = from_settings(settings)
    if max_records:
        config = config.model_copy(update={"mix": config.mix.model_copy(update={
            "max_records": max_records,
            "min_records": min(config.mix.min_records, max_records)})})
    rep = Replicator(config, seed, transactions=transactions, clock=WallClock())
    sink = KafkaSink(settings.kafka.bootstrap_servers)
    try:
        summary = drive(rep, sink, LoadOptions(transactions=transactions, progress=True))
    finally:
        sink.close()
    return {**summary.as_dict(), "records_per_transaction":
            f"{config.mix.min_records}-{config.mix.max_records}"}


def earlier_load(run: str) -> dict[str, Any]:
    """The load summary of an earlier run, whose topic this run reads again."""
    folder = BENCH_DIR / "runs" / run
    if (folder / "load.json").exists():
        return dict(json.loads((folder / "load.json").read_text()))
    return dict(json.loads((folder / "results.json").read_text())["load"])


def reused_topics(run: str) -> str:
    """The topics' prefix that holds an earlier run's load: its own, or the one it reused."""
    return str(earlier_load(run).get("topics", f"bench.{run}"))


def topic_messages(settings: Settings) -> dict[str, int]:
    """Messages now in each source topic (sum over partitions of the high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"bench-{uuid.uuid4()}"})
    try:
        out = {}
        for topic in settings.source_topics():
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            out[topic] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in meta.partitions)
        return out
    finally:
        consumer.close()


# -- one phase, in its own driver process -----------------------------------------------------


def raw_passthrough(spark: Any, settings: Settings) -> Any:
    """(a) Kafka → Delta with no decoding: the job's own source (``kafka_reader``: the same
    options), one append per batch."""
    from pyspark.sql import functions as F

    from pipeline.spark.engine.query import kafka_reader

    st = settings.stream
    rows = kafka_reader(spark, settings).select("topic", "partition", "offset", "key", "value",
                         F.col("timestamp").alias("kafka_time"),
                         F.current_timestamp().alias("landed_at"))
    lake = settings.location(st.lake_dir)
    return (rows.writeStream.format("delta").outputMode("append")
            .option("checkpointLocation", f"{settings.location(st.checkpoint_dir)}-raw")
            .trigger(processingTime=st.trigger_interval)
            .queryName("bench-raw").start(f"{lake}/raw"))


def _progress_dicts(query: Any) -> dict[int, dict[str, Any]]:
    return {int(p["batchId"]): p for p in (json.loads(x.json) for x in query.recentProgress)}


def wait_for(query: Any, expect: int, phase: str, timeout_s: float) -> dict[int, dict[str, Any]]:
    """Until the batches have read ``expect`` messages; a progress line every second.

    Counting input rows (against the topic's end offsets, known before the query started) is
    exact for both queries; ``await_idle`` cannot serve the raw query, which runs no empty
    batches once caught up.
    """
    started = time.monotonic()
    seen: dict[int, dict[str, Any]] = {}
    while True:
        if query.exception() is not None:
            raise RuntimeError(f"{phase} query failed: {query.exception()}")
        seen.update(_progress_dicts(query))
        done = sum(int(p.get("numInputRows", 0)) for p in seen.values())
        elapsed = time.monotonic() - started
        rate = done / elapsed if elapsed else 0.0
        line = (f"[{phase}] {len(seen)} batches, {done}/{expect} msgs "
                f"({100 * done / max(expect, 1):.0f}%), {rate:.0f} msgs/s, "
                f"load {load_average()}")
        if sys.stderr.isatty():
            print(f"\r{line}   ", end="", file=sys.stderr, flush=True)
        elif int(elapsed) % 10 == 0 or done >= expect:  # a log file: one line per ~10 s
            print(line, file=sys.stderr, flush=True)
        if done >= expect:
            if sys.stderr.isatty():
                print(file=sys.stderr)
            return seen
        if elapsed > timeout_s:
            raise TimeoutError(f"{phase}: {done}/{expect} messages after {timeout_s:.0f}s")
        time.sleep(1.0)


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def batch_window(batches: dict[int, dict[str, Any]]) -> float:
    """Seconds from the first batch's trigger to the end of the last batch that read data."""
    ordered = [batches[b] for b in sorted(batches)]
    with_data = [p for p in ordered if int(p.get("numInputRows", 0)) > 0]
    last = with_data[-1]
    end = _ts(last["timestamp"]) + int(last["batchDuration"]) / 1000
    return end - _ts(ordered[0]["timestamp"])


def duration_breakdown(batches: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Mean milliseconds per data batch of each durationMs part (where the time goes)."""
    data = [p for p in batches.values() if int(p.get("numInputRows", 0)) > 0]
    return {k: sum(int(p["durationMs"].get(k, 0)) for p in data) / len(data)
            for k in DURATION_KEYS}


def batch_series(batches: dict[int, dict[str, Any]]) -> list[int]:
    """triggerExecution ms of each data batch, in batch order."""
    return [int(batches[b]["durationMs"].get("triggerExecution", 0)) for b in sorted(batches)
            if int(batches[b].get("numInputRows", 0)) > 0]


def steady_ms(series: list[int], warmup: int = 2) -> float | None:
    """Median batch time after the first ``warmup`` batches (JVM, Python workers and the first
    Delta commits warm up over the first two in both phases), None when too few batches."""
    rest = sorted(series[warmup:])
    return float(rest[len(rest) // 2]) if rest else None


def steady_tx_s(metrics: Path, warmup: int = 2) -> float | None:
    """Transactions per second over the data batches after the first ``warmup`` (the job's
    metrics lines: each batch's transactions and duration), None when too few batches."""
    if not metrics.exists():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    data = [r for r in rows if r.get("messages")][warmup:]
    ms = sum(r["duration_ms"] for r in data)
    return sum(r["transactions"] for r in data) / ms * 1000 if data and ms else None


def latency_percentiles(spark: Any, path: str, pairs: dict[str, tuple[str, str]]
                        ) -> dict[str, list[float]]:
    """[p50, p99] seconds of end - start for each named pair of timestamp columns."""
    frame = spark.read.format("delta").load(path)
    exprs = [f"percentile(unix_micros({end}) - unix_micros({start}), array(0.5, 0.99)) "
             f"AS {name}" for name, (start, end) in pairs.items()]
    row = frame.selectExpr(*exprs).collect()[0]
    return {name: [v / 1e6 for v in row[name]] if row[name] else [] for name in pairs}


def sink_timing(metrics_file: Path) -> dict[str, float]:
    """Mean per data batch from the job's metrics JSONL: the foreachBatch sink's own time."""
    records = [json.loads(line) for line in metrics_file.read_text().splitlines() if line]
    data = [r for r in records if r.get("messages")]
    if not data:
        return {}
    sink = [r.get("counts", {}).get("sink_ms", 0) for r in data]
    laps = sorted({k for r in data for k in r.get("counts", {})
                   if k.startswith("t_") and k.endswith("_ms")})
    return {"sink_ms": sum(sink) / len(data),
            "laps_ms": {k: sum(r.get("counts", {}).get(k, 0) for r in data) / len(data)
                        for k in laps},
            "batch_ms": sum(r["duration_ms"] for r in data) / len(data),
            "state_rows_last": data[-1].get("state_rows", 0),
            "state_memory_mb_last": data[-1].get("state_memory_bytes", 0) / 1e6}


def typed_rows(spark: Any, settings: Settings) -> dict[str, int]:
    """Rows of every ``current_`` and ``history_`` table, summed per kind (none: no layouts)."""
    from pipeline.spark.land.tables import table_path
    from pipeline.spark.typed.tables import current_table, history_table

    out: dict[str, int] = {}
    for lay in settings.layouts:
        for kind, name in (("current", current_table(lay)), ("history", history_table(lay))):
            if kind == "history" and not lay.history:
                continue
            rows = spark.read.format("delta").load(table_path(settings, name)).count()
            out[kind] = out.get(kind, 0) + rows
    return out


def run_phase(phase: str, conf: Path, expect: int, timeout_s: float) -> dict[str, Any]:
    """Run one query from earliest to caught up; the figures as a dict."""
    from pipeline.spark.engine.session import build_session
    from pipeline.spark.land.tables import table_path

    settings = load_settings(conf, env={})
    spark = build_session(settings)
    started = time.monotonic()
    if phase == "raw":
        query = raw_passthrough(spark, settings)
    else:
        from pipeline.ops.metrics import job_metrics
        from pipeline.spark.engine.query import start_stream

        query = start_stream(spark, settings, observe=job_metrics)
    try:
        batches = wait_for(query, expect, phase, timeout_s)
        wall = time.monotonic() - started
        if phase == "pipeline":
            from pipeline.spark.engine.drain import await_idle

            await_idle(query, timeout_s=120)  # caught up and idle: nothing left in flight
        batches.update(_progress_dicts(query))
    finally:
        from pipeline.spark.engine.drain import stop_between_batches

        stop_between_batches(query)  # not mid-batch: no interrupted-thread trace in the log
    result: dict[str, Any] = {
        "phase": phase, "messages": expect, "wall_s": wall, "window_s": batch_window(batches),
        "batches": sum(1 for p in batches.values() if int(p.get("numInputRows", 0)) > 0),
        "breakdown_ms": duration_breakdown(batches), "batch_ms": batch_series(batches)}
    if phase == "raw":
        path = f"{settings.location(settings.stream.lake_dir)}/raw"
        result["latency_s"] = latency_percentiles(
            spark, path, {"sent_to_landed": ("kafka_time", "landed_at")})
        result["landed_messages"] = spark.read.format("delta").load(path).count()
    else:
        tx_path = table_path(settings, "transactions")
        result["latency_s"] = latency_percentiles(
            spark, tx_path, {"sent_to_landed": ("sent_time", "landed_at"),
                             "commit_to_landed": ("commit_time", "landed_at")})
        result["landed_transactions"] = spark.read.format("delta").load(tx_path).count()
        result["landed_records"] = spark.read.format("delta").load(
            table_path(settings, "records")).count()
        result["quarantined"] = spark.read.format("delta").load(
            table_path(settings, "quarantine")).count()
        result["sink"] = sink_timing(Path(settings.location(settings.stream.metrics_file)))
        result["typed_rows"] = typed_rows(spark, settings)
    spark.stop()
    return result


def phase_main(args: argparse.Namespace) -> int:
    """Entry point of a phase subprocess: one JSON result line on stdout."""
    result = run_phase(args.phase, Path(args.conf), args.expect, args.timeout)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def spawn_phase(phase: str, conf: Path, expect: int, timeout_s: float) -> dict[str, Any]:
    """Run a phase in a fresh driver process, sampling its process tree's memory."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--conf", str(conf),
           "--expect", str(expect), "--timeout", str(timeout_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    sampler = PeakSampler(proc.pid).start()
    out, _ = proc.communicate()
    peak = sampler.stop()
    lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"phase {phase} failed (exit {proc.returncode})")
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    result["peak_memory_mb"] = asdict(peak)
    return result


# -- codec ratio and the report ---------------------------------------------------------------


def codec_ratio(seconds: float = 1.0) -> tuple[float, float]:
    """(ours, adapya-era) messages/s on the codec benchmark's whole corpus, round-robin."""
    from benchmarks.bench_codec import adapya_decoder, corpus, measure
    from pipeline.urb import decode_message

    messages = [raw for _name, raw in corpus()]
    theirs = adapya_decoder()
    ours = base = 0.0
    for _ in range(3):  # alternate, keep each one's best (shared machine)
        ours = max(ours, measure(decode_message, messages, seconds / 3))
        base = max(base, measure(theirs, messages, seconds / 6))
    return ours, base


def rates(result: dict[str, Any], load: dict[str, Any], records: int) -> dict[str, float]:
    """Per-second rates over the batch window; ``records`` (URBR) is what the pipeline landed
    from the topic, the same for both phases (raw does not decode them)."""
    window = result["window_s"]
    return {"msgs_s": result["messages"] / window, "tx_s": load["transactions"] / window,
            "recs_s": records / window, "mb_s": load["bytes"] / 1e6 / window}


def _mem(peak: dict[str, Any]) -> str:
    mem = TreeMemory(**peak)
    workers = (f"{mem.python_workers_mb:.0f} MB ({mem.python_workers} procs, the largest "
               f"{mem.largest_worker_mb:.0f} MB)" if mem.python_workers else "none")
    return (f"JVM {mem.driver_jvm_mb:.0f} MB, driver Python {mem.driver_python_mb:.0f} MB, "
            f"Python workers {workers}")


def _lat(values: list[float]) -> str:
    return f"{values[0]:.1f} / {values[1]:.1f} s" if values else "n/a"


def report(settings: Settings, load: dict[str, Any], results: dict[str, dict[str, Any]],
           codec: tuple[float, float], loads: list[str]) -> None:
    """The figures: one table, then where the time goes, then the verdict."""
    raw, full = results["raw"], results["pipeline"]
    records = int(full.get("landed_records") or 0)
    r, f = rates(raw, load, records), rates(full, load, records)
    print("\n== Pipeline throughput ==")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in throughput_settings(settings).items()))
    print(f"load: {load['transactions']} transactions "
          f"({load.get('records_per_transaction', '1-8')} records each), "
          f"{load['messages']} messages, "
          f"{load['bytes'] / 1e6:.1f} MB ({load['bytes'] / max(load['messages'], 1):.0f} B/msg) "
          f"in {load['seconds']:.1f} s ({load['transactions'] / load['seconds']:.0f} tx/s)")
    print(f"load average during the run (1/5/15 min): {' | '.join(loads)}")
    head = (f"{'':10} {'msgs/s':>8} {'tx/s':>8} {'recs/s':>8} {'MB/s':>6} {'batches':>7} "
            f"{'window s':>8} "
            f"{'wall s':>7}  {'sent→landed p50/p99':>20}  {'commit→landed p50/p99':>22}")
    print(head)
    print("-" * len(head))
    for name, res, rt in (("(a) raw", raw, r), ("(b) full", full, f)):
        lat = res["latency_s"]
        print(f"{name:10} {rt['msgs_s']:8,.0f} {rt['tx_s']:8,.0f} {rt['recs_s']:8,.0f} "
              f"{rt['mb_s']:6.2f} "
              f"{res['batches']:7} {res['window_s']:8.1f} {res['wall_s']:7.1f}  "
              f"{_lat(lat.get('sent_to_landed', [])):>20}  "
              f"{_lat(lat.get('commit_to_landed', [])):>22}")
    for name, res in (("(a) raw", raw), ("(b) full", full)):
        print(f"peak memory {name}: {_mem(res['peak_memory_mb'])}")
    print("mean ms per data batch (durationMs): ")
    for name, res in (("(a) raw", raw), ("(b) full", full)):
        parts = ", ".join(f"{k} {v:.0f}" for k, v in res["breakdown_ms"].items())
        print(f"  {name}: {parts}")
    if full.get("sink"):
        s = full["sink"]
        print(f"  (b) foreachBatch sink (Kafka read, decode, state, Delta commits run in it): "
              f"{s['sink_ms']:.0f} ms of {s['batch_ms']:.0f} ms per batch; state after the "
              f"run: {s['state_rows_last']} rows, {s['state_memory_mb_last']:.1f} MB")
    print(f"landed: raw {raw.get('landed_messages')} messages; pipeline "
          f"{full.get('landed_transactions')} transactions, {full.get('quarantined')} "
          "quarantined")
    print("batch times (triggerExecution ms, data batches in order):")
    for name, res in (("(a) raw", raw), ("(b) full", full)):
        print(f"  {name}: {', '.join(map(str, res.get('batch_ms', [])))}")
    ratio = f["msgs_s"] / r["msgs_s"]
    verdict = "meets" if ratio >= 0.5 else "MISSES"
    print(f"ratio b/a (messages/s over the window): {ratio:.2f} — {verdict} the goal of ≥ 0.5")
    steady_a, steady_b = steady_ms(raw.get("batch_ms", [])), steady_ms(full.get("batch_ms", []))
    if steady_a and steady_b:
        print(f"steady state (median batch after the first two): raw {steady_a:.0f} ms, full "
              f"{steady_b:.0f} ms per batch of equal size: b/a {steady_a / steady_b:.2f}")
    tx_s = steady_tx_s(Path(settings.location(settings.stream.metrics_file)))
    if tx_s:
        keys = len(settings.subscriptions)
        print(f"full pipeline, steady state: {tx_s:,.0f} tx/s with {keys} busy "
              f"key{'s' if keys > 1 else ''} (the batches after the first two)")
    print(f"codec vs adapya-era (whole corpus, round-robin): {codec[0]:,.0f} vs "
          f"{codec[1]:,.0f} msgs/s = {codec[0] / codec[1]:.1f}x")


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transactions", type=int, default=50_000, help="transactions to load")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--subscriptions", type=int, choices=range(1, 9), metavar="1..8",
                   help="busy keys: the template's first N subscriptions (1: one busy "
                        "key), ORDERS ones added past its two")
    p.add_argument("--max-records", type=int,
                   help="records per transaction at most (the load's shape; default 8: 1-8)")
    p.add_argument("--max-offsets", type=int, help="stream.max_offsets_per_trigger override")
    p.add_argument("--trigger", help="stream.trigger_interval override, e.g. '0 seconds'")
    p.add_argument("--shuffle-partitions", type=int, help="stream.shuffle_partitions override")
    p.add_argument("--source-records-per-task", type=int,
                   help="stream.source_records_per_task override (both phases' Kafka source)")
    p.add_argument("--reuse-load", metavar="RUN",
                   help="read the topic an earlier run (.bench/runs/RUN) loaded instead of "
                        "loading a new one; its --transactions/--subscriptions/--seed apply")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="which phases to run, comma-separated (default: raw,pipeline)")
    p.add_argument("--raw-writer", choices=["auto", "direct", "spark"],
                   help="stream.raw_writer override (who writes the bulk tables' files)")
    p.add_argument("--state-api", choices=["transformWithStateInPandas",
                                            "applyInPandasWithState"],
                   help="stream.state_api override")
    p.add_argument("--local-file-system", choices=["nio", "hadoop"],
                   help="spark.local_file_system override (both phases)")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for both phases' sessions (spark.conf in the run's "
                        "conf; repeatable), e.g. spark.eventLog.enabled=true for event logs")
    p.add_argument("--timeout", type=float, default=1800.0, help="per phase, seconds")
    p.add_argument("--keep-broker", action="store_true", help="leave the bench broker running")
    p.add_argument("--keep-lake", action="store_true",
                   help="keep the run's lakes and checkpoints (removed when it ends: a run "
                        "leaves a few hundred MB, and --reuse-load needs only the topic)")
    p.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    p.add_argument("--conf", help=argparse.SUPPRESS)
    p.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    given = {"max_offsets_per_trigger": args.max_offsets, "trigger_interval": args.trigger,
             "shuffle_partitions": args.shuffle_partitions, "raw_writer": args.raw_writer,
             "source_records_per_task": args.source_records_per_task,
             "state_api": args.state_api}
    return {k: v for k, v in given.items() if v is not None}


def spark_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The run's ``spark`` section overrides: the local file system and ``--spark-conf``."""
    out: dict[str, Any] = {}
    if args.local_file_system:
        out["local_file_system"] = args.local_file_system
    pairs = [item.partition("=") for item in args.spark_conf]
    if bad := [key for key, eq, _ in pairs if not eq or not key]:
        raise SystemExit(f"--spark-conf wants KEY=VALUE, got {bad[0]!r}")
    if pairs:
        out["conf"] = {key.strip(): value.strip() for key, _, value in pairs}
    return out or None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase:
        return phase_main(args)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    topics = reused_topics(args.reuse_load) if args.reuse_load else f"bench.{run_id}"
    settings, conf = run_settings(
        BENCH_DIR / "runs" / run_id, topics, stream=overrides(args),
        subscriptions=args.subscriptions,
        spark=spark_overrides(args))
    phases = [p for p in PHASES if p in args.phases.split(",")]
    print(f"bench run {run_id}: conf {conf.relative_to(ROOT)}; load average {load_average()}")
    started_broker = ensure_broker(settings)
    loads = [load_average()]
    try:
        load = (earlier_load(args.reuse_load) if args.reuse_load
                else load_topic(settings, args.transactions, args.seed, args.max_records))
        load["topics"] = topics  # a run that reuses this one reads the same topics
        (conf.parent / "load.json").write_text(json.dumps(load))
        expect = sum(topic_messages(settings).values())
        if not expect:
            raise SystemExit(f"bench: the topics {topics}.* hold no messages"
                             + (f" (was run {args.reuse_load}'s load made on this broker?)"
                                if args.reuse_load else ""))
        results = {}
        for phase in phases:
            results[phase] = spawn_phase(phase, conf, expect, args.timeout)
            loads.append(load_average())
        if len(results) < len(PHASES):
            print(json.dumps({"load": load, "results": results}, indent=1))
            return 0
        codec = codec_ratio()
        report(settings, load, results, codec, loads)
        (conf.parent / "results.json").write_text(json.dumps(
            {"load": load, "results": results, "codec": codec, "load_average": loads,
             "settings": throughput_settings(settings)}, indent=1))
    finally:
        if not args.keep_lake:
            print(clear_run(conf.parent))
        if started_broker and not args.keep_broker:
            from devtools import broker

            print(broker.stop(settings))
    return 0


#: What a run leaves that no later run reads: the phases' lakes and checkpoints (a few
#: hundred MB each; ``--reuse-load`` needs only the topic and ``load.json``).
RUN_DATA = ("lake", "ck", "ck-raw")


def clear_run(run_dir: Path) -> str:
    """Delete a finished run's lakes and checkpoints; its conf, load, metrics and results
    stay."""
    freed = 0
    for name in RUN_DATA:
        folder = run_dir / name
        if folder.is_dir():
            freed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    return (f"run data removed ({freed / 1e6:,.0f} MB: {', '.join(RUN_DATA)}; --keep-lake "
            f"keeps them)")


if __name__ == "__main__":
    raise SystemExit(main())
