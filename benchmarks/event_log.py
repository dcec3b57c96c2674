"""Where a streaming batch's Spark time goes: a Spark event log summarised per batch and stage.

The job's metrics (``counts.t_*_ms``) say how long the batch writer's phases took; the Spark
job inside ``t_state_ms`` (Kafka read and decode stage, state stage, the row count) is one
figure there. Its stages come from Spark's event log. Write one with the bench's
``--spark-conf`` (both phases, or ``--phases pipeline``)::

    .venv/bin/python benchmarks/bench_pipeline.py --reuse-load RUN --transactions 1200000 \\
        --max-offsets 20000 --max-records 1 --phases pipeline \\
        --spark-conf spark.eventLog.enabled=true --spark-conf spark.eventLog.dir=file:///tmp/ev
    .venv/bin/python benchmarks/event_log.py /tmp/ev --batches 10-14

Per streaming batch (``streaming.sql.batchId``), every job and its stages: wall time (stage
submission to completion), tasks, the tasks' summed wall and JVM CPU time (a Python worker's
time is not in the JVM's CPU figure: wall minus CPU is mostly Python, I/O and waiting), GC,
shuffle written and read. Spark 4 compresses the log with zstd by default: read here through
pyarrow's codec, so no extra package is needed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Stage:
    """One stage's wall time and its tasks' sums (ms; bytes for the shuffle)."""

    stage_id: int
    name: str = ""
    tasks: int = 0
    wall_ms: int = 0
    task_ms: int = 0
    cpu_ms: float = 0.0
    gc_ms: int = 0
    shuffle_written: int = 0
    shuffle_read: int = 0


@dataclass
class Job:
    """A Spark job of one streaming batch, with its stages in submission order."""

    job_id: int
    batch: int
    description: str
    wall_ms: int = 0
    stages: list[Stage] = field(default_factory=list)


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a log file, or of every ``events_*`` file of a log folder (Spark's
    rolling logs), in order; ``.zstd``, ``.lz4`` and ``.snappy`` ones decompressed."""
    files = sorted(path.glob("**/events_*")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"{path}: no Spark event log (events_* files) here")
    for file in files:
        yield from _lines(file)


def _lines(file: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

    codec = {"zstd": "zstd", "lz4": "lz4", "snappy": "snappy"}.get(file.suffix.lstrip("."))
    raw = file.open("rb") if codec is None else pa.CompressedInputStream(str(file), codec)
    with raw as stream:
        buffered = stream.read()
    for line in buffered.decode().splitlines():
        if line.strip():
            yield json.loads(line)


def summarise(events: Iterable[dict[str, Any]]) -> list[Job]:
    """The jobs of streaming batches (others, such as the bench's final counts, left out)."""
    jobs: dict[int, Job] = {}
    stage_of: dict[int, Stage] = {}
    started: dict[int, int] = {}
    for event in events:
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            batch = props.get("streaming.sql.batchId")
            if batch is None:
                continue
            job = Job(event["Job ID"], int(batch),
                      str(props.get("spark.job.description", "")).splitlines()[0][:60])
            job.stages = [stage_of.setdefault(s, Stage(s)) for s in event["Stage IDs"]]
            jobs[job.job_id], started[job.job_id] = job, event["Submission Time"]
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            job = jobs[event["Job ID"]]
            job.wall_ms = event["Completion Time"] - started[job.job_id]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stage = stage_of.setdefault(info["Stage ID"], Stage(info["Stage ID"]))
            stage.name = info["Stage Name"].split(" at ")[0]
            stage.wall_ms = info.get("Completion Time", 0) - info.get("Submission Time", 0)
        elif kind == "SparkListenerTaskEnd":
            _add_task(stage_of.setdefault(event["Stage ID"], Stage(event["Stage ID"])), event)
    for job in jobs.values():  # skipped stages (a cached shuffle) never completed
        job.stages = [s for s in job.stages if s.tasks]
    return sorted(jobs.values(), key=lambda j: j.job_id)


def _add_task(stage: Stage, event: dict[str, Any]) -> None:
    metrics = event.get("Task Metrics") or {}
    info = event["Task Info"]
    written = metrics.get("Shuffle Write Metrics") or {}
    read = metrics.get("Shuffle Read Metrics") or {}
    stage.tasks += 1
    stage.task_ms += info["Finish Time"] - info["Launch Time"]
    stage.cpu_ms += metrics.get("Executor CPU Time", 0) / 1e6
    stage.gc_ms += metrics.get("JVM GC Time", 0)
    stage.shuffle_written += written.get("Shuffle Bytes Written", 0)
    stage.shuffle_read += read.get("Local Bytes Read", 0) + read.get("Remote Bytes Read", 0)


def batch_range(text: str | None) -> set[int] | None:
    """``10-14`` or ``3,7,9`` → the batch ids; None: every batch."""
    if not text:
        return None
    out: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def report(jobs: list[Job], batches: set[int] | None) -> list[str]:
    """One line per job, then one per stage, in ms and MB."""
    lines = []
    for job in jobs:
        if batches is not None and job.batch not in batches:
            continue
        lines.append(f"batch {job.batch} job {job.job_id} ({job.description}): {job.wall_ms} ms")
        lines += [f"  stage {s.stage_id} {s.name}: {s.tasks} tasks, wall {s.wall_ms} ms, "
                  f"tasks {s.task_ms} ms (JVM CPU {s.cpu_ms:.0f}, GC {s.gc_ms}), shuffle "
                  f"written {s.shuffle_written / 1e6:.1f} MB, read {s.shuffle_read / 1e6:.1f} MB"
                  for s in job.stages]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path, help="an event log file, or the folder Spark wrote it in")
    p.add_argument("--batches", help="streaming batch ids: 10-14 or 3,7,9 (default: all)")
    args = p.parse_args(argv)
    for line in report(summarise(read_events(args.log)), batch_range(args.batches)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
