"""Lake soak: does the lake stay fast over thousands of batches, with maintenance off and on?

Not part of CI (``make lake-soak``). Run from the repository root::

    .venv/bin/python benchmarks/lake_soak.py                       # 2,000 batches per phase
    .venv/bin/python benchmarks/lake_soak.py --batches 60 --sample-batches 20 --every-minutes 1

Per phase (``off``: no maintenance but Delta's auto compaction of the small tables, as the
job ships; ``on``: the job's own compaction, ``maintenance.every_minutes``) one run, like
benchmarks/soak.py: the bench broker (127.0.0.1:29092), fresh topics, the simulator producing a
trickle (``--rate`` transactions per second) as a separate process, and the job in this
process at the trigger of ``--trigger`` (2 seconds: the job's batches come that often under a
steady trickle). Every ``--sample-batches`` batches one row: data files of each bulk table
(the Delta log's count), the size of all Delta logs, and the time of two analyst queries:
records counted by file number, and the records of one ISN in tsnr order. At the end the first
and the last row of each phase side by side. Each row also has the query's checkpoint: its files,
those of its state store, and the mean walCommit of the batches since the row before (the
state store and the offsets log must stay as flat as the lake: Spark keeps
``spark.sql.streaming.minBatchesToRetain`` batches of each, 100 by default).

A full run (2,000 batches per phase) takes close to two hours on the 2-core machine with the
phases side by side: a batch there costs 2-3.7 s, not the trigger's 2 (BENCHMARKS.md "Lake
soak"). The phases can run as two
processes side by side (``--phases off`` and ``--phases on``, each with ``--keep-broker``).
Where the batches' time went, per window of batches: ``benchmarks/lake_soak_report.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import BENCH_DIR, ensure_broker, run_settings  # noqa: E402
from benchmarks.soak import read_records, start_simulator, stop_simulator  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.spark.land.tables import DIRECT_TABLES, table_path  # noqa: E402

PHASES = ("off", "on")
FAULTS: dict[str, float] = {}  # a clean trickle: the lake, not the gaps, is measured


@dataclass
class LakeSample:
    """One row: after ``batches`` batches, the lake's shape and two queries' times."""

    phase: str
    batches: int
    files: dict[str, int]
    log_mb: float
    count_by_fnr_s: float
    isn_history_s: float
    #: the query's checkpoint: files in all of it and in its state store, and the mean
    #: walCommit (the offsets log's write) of the batches since the sample before
    checkpoint_files: int = 0
    state_files: int = 0
    wal_commit_ms: float = 0.0


def log_mb(lake: Path) -> float:
    """Bytes of every table's ``_delta_log`` (commits, checkpoints, checksums), in MB."""
    return sum(f.stat().st_size for f in lake.glob("*/_delta_log/*") if f.is_file()) / 1e6


def checkpoint_shape(checkpoint: Path) -> tuple[int, int]:
    """Files in the whole checkpoint and in its state store (``state/``)."""
    every = sum(1 for f in checkpoint.rglob("*") if f.is_file())
    state = sum(1 for f in (checkpoint / "state").rglob("*") if f.is_file())
    return every, state


def mean_wal_commit_ms(records: list[dict[str, Any]]) -> float:
    times = [r["durations_ms"].get("walCommit", 0) for r in records if r.get("durations_ms")]
    return sum(times) / len(times) if times else 0.0


def timed(action: Any) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def take_sample(spark: Any, settings: Settings, phase: str, batches: int,
                isn: int | None) -> tuple[LakeSample, int | None]:
    """The lake now; the ISN of the history query is the first one landed."""
    from delta.tables import DeltaTable

    files = {t: int(DeltaTable.forPath(spark, table_path(settings, t)).detail()
                    .first()["numFiles"]) for t in DIRECT_TABLES}
    records = spark.read.format("delta").load(table_path(settings, "records"))
    if isn is None:
        first = records.where("fnr = 4").select("isn").first()
        isn = int(first["isn"]) if first else 0
    by_fnr = timed(lambda: records.groupBy("fnr").count().collect())
    history = timed(lambda: records.where(f"fnr = 4 AND isn = {isn}")
                    .orderBy("epoch", "tsnr", "rsnr").collect())
    lake = Path(settings.location(settings.stream.lake_dir))
    every, state = checkpoint_shape(Path(settings.location(settings.stream.checkpoint_dir)))
    return LakeSample(phase, batches, files, log_mb(lake), by_fnr, history, every, state), isn


def print_row(s: LakeSample) -> None:
    files = " ".join(f"{s.files[t]:7}" for t in DIRECT_TABLES)
    print(f"{s.phase:5} {s.batches:7} {files} {s.log_mb:8.1f} {s.count_by_fnr_s:8.2f} "
          f"{s.isn_history_s:8.2f} {s.checkpoint_files:8} {s.state_files:8} "
          f"{s.wal_commit_ms:8.0f}", flush=True)


HEADER = (f"{'phase':5} {'batches':>7} " + " ".join(f"{t[:7]:>7}" for t in DIRECT_TABLES)
          + f" {'log MB':>8} {'q fnr s':>8} {'q isn s':>8} {'ck files':>8} {'state':>8}"
          f" {'wal ms':>8}")


def run_phase(phase: str, args: argparse.Namespace, run_dir: Path) -> list[LakeSample]:
    from pipeline.ops.metrics import job_metrics
    from pipeline.spark.engine.drain import stop_between_batches
    from pipeline.spark.engine.query import start_stream
    from pipeline.spark.engine.session import build_session

    settings, conf = run_settings(run_dir / phase, f"lakesoak.{run_dir.name}.{phase}",
                                  stream={"trigger_interval": args.trigger})
    if phase == "on":
        settings = settings.model_copy(update={"maintenance": settings.maintenance.model_copy(
            update={"every_minutes": args.every_minutes})})
    ensure_broker(settings)  # running already: this creates the phase's topics
    spark = build_session(settings)
    query = start_stream(spark, settings, observe=job_metrics)
    # the simulator runs long enough for any run; it is stopped when the batches are done
    sim_log = run_dir / phase / "simulator.log"
    sim = start_simulator(conf, settings, args.rate, 10 * 24 * 3600, FAULTS, sim_log)
    metrics = Path(settings.location(settings.stream.metrics_file))
    samples: list[LakeSample] = []
    isn: int | None = None
    next_sample = args.sample_batches
    try:
        while True:
            time.sleep(2)
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            records = read_records(metrics)
            batches = len(records)
            if batches >= next_sample:
                sample, isn = take_sample(spark, settings, phase, batches, isn)
                sample.wal_commit_ms = mean_wal_commit_ms(records[-args.sample_batches:])
                samples.append(sample)
                print_row(sample)
                next_sample += args.sample_batches
            if batches >= args.batches:
                break
    finally:
        stop_simulator(sim, sim_log)
        stop_between_batches(query)
        spark.stop()
    return samples


def run(args: argparse.Namespace) -> int:
    run_dir = BENCH_DIR / "lake_soak" / time.strftime("%Y%m%d-%H%M%S")
    settings, _ = run_settings(run_dir / "probe", "lakesoak.probe")
    print(f"lake soak: {args.batches} batches per phase at {args.rate} tx/s, trigger "
          f"{args.trigger}, maintenance on: every {args.every_minutes} min", flush=True)
    started_broker = ensure_broker(settings)
    samples: list[LakeSample] = []
    print(HEADER, flush=True)
    try:
        for phase in args.phases:
            samples += run_phase(phase, args, run_dir)
    finally:
        if started_broker and not args.keep_broker:
            from devtools import broker

            print(broker.stop(settings))
    print("\nfirst and last sample of each phase:")
    for phase in args.phases:
        rows = [s for s in samples if s.phase == phase]
        for s in rows[:1] + rows[-1:] if len(rows) > 1 else rows:
            print_row(s)
    (run_dir / "lake_soak.json").write_text(json.dumps(
        {"args": vars(args), "samples": [asdict(s) for s in samples]}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=2000, help="batches per phase")
    p.add_argument("--sample-batches", type=int, default=200,
                   help="batches between samples")
    p.add_argument("--rate", type=float, default=5.0, help="transactions per second")
    p.add_argument("--trigger", default="2 seconds", help="stream.trigger_interval")
    p.add_argument("--every-minutes", type=float, default=10.0,
                   help="maintenance.every_minutes of the 'on' phase")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--keep-broker", action="store_true", help="leave the bench broker running")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
