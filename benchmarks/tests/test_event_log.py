"""The event-log summary (benchmarks/event_log.py) on a small log written here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks.event_log import batch_range, read_events, report, summarise


def _task(stage: int, launch: int, finish: int, cpu_ns: int, written: int = 0,
          read: int = 0) -> dict:
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
            "Task Info": {"Launch Time": launch, "Finish Time": finish},
            "Task Metrics": {"Executor CPU Time": cpu_ns, "JVM GC Time": 1,
                             "Shuffle Write Metrics": {"Shuffle Bytes Written": written},
                             "Shuffle Read Metrics": {"Local Bytes Read": read,
                                                      "Remote Bytes Read": 0}}}


EVENTS = [
    {"Event": "SparkListenerJobStart", "Job ID": 7, "Submission Time": 1000,
     "Stage IDs": [3, 4], "Properties": {"streaming.sql.batchId": "12",
                                         "spark.job.description": "urbpipe\nid = x"}},
    _task(3, 1000, 1100, 40_000_000, written=2_000_000),
    _task(3, 1000, 1150, 60_000_000, written=3_000_000),
    {"Event": "SparkListenerStageCompleted", "Stage Info": {
        "Stage ID": 3, "Stage Name": "run at <unknown>:0", "Number of Tasks": 2,
        "Submission Time": 1000, "Completion Time": 1160}},
    _task(4, 1160, 1400, 30_000_000, read=5_000_000),
    {"Event": "SparkListenerStageCompleted", "Stage Info": {
        "Stage ID": 4, "Stage Name": "call at worker.py:1", "Number of Tasks": 1,
        "Submission Time": 1160, "Completion Time": 1410}},
    {"Event": "SparkListenerJobEnd", "Job ID": 7, "Completion Time": 1420},
    # a job outside any streaming batch (the bench's final counts): left out
    {"Event": "SparkListenerJobStart", "Job ID": 8, "Submission Time": 2000,
     "Stage IDs": [5], "Properties": {}},
]


def _write(path: Path, codec: str | None) -> None:
    text = "".join(json.dumps(e) + "\n" for e in EVENTS).encode()
    if codec is None:
        path.write_bytes(text)
        return
    with pa.CompressedOutputStream(str(path), codec) as out:
        out.write(text)


@pytest.mark.parametrize(("name", "codec"), [("events_1_app", None),
                                             ("events_1_app.zstd", "zstd")])
def test_a_batchs_job_and_its_stages(tmp_path: Path, name: str, codec: str | None) -> None:
    _write(tmp_path / name, codec)
    [job] = summarise(read_events(tmp_path))
    assert (job.job_id, job.batch, job.description, job.wall_ms) == (7, 12, "urbpipe", 420)
    decode, state = job.stages
    assert (decode.name, decode.tasks, decode.wall_ms, decode.task_ms) == ("run", 2, 160, 250)
    assert decode.cpu_ms == pytest.approx(100.0)
    assert (decode.shuffle_written, decode.gc_ms) == (5_000_000, 2)
    assert (state.name, state.tasks, state.shuffle_read) == ("call", 1, 5_000_000)


def test_report_keeps_the_batches_asked_for(tmp_path: Path) -> None:
    _write(tmp_path / "events_1_app", None)
    jobs = summarise(read_events(tmp_path))
    assert report(jobs, {11}) == []
    lines = report(jobs, {12})
    assert lines[0] == "batch 12 job 7 (urbpipe): 420 ms"
    assert "written 5.0 MB" in lines[1] and "read 5.0 MB" in lines[2]


def test_batch_range() -> None:
    assert batch_range("10-12,15") == {10, 11, 12, 15}
    assert batch_range(None) is None


def test_a_folder_without_a_log_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no Spark event log"):
        list(read_events(tmp_path))
