"""The metrics listener's bookkeeping (fake progress objects), latency legs, Prometheus."""

from __future__ import annotations

import json
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.ops.metrics import (
    MetricsListener,
    attach_metrics,
    format_progress,
    input_lag,
    key_totals,
    latency_breakdown,
    percentile,
    read_last_record,
)
from tests.unit.ops.conftest import at


@dataclass
class FakeOperator:
    numRowsTotal: int  # noqa: N815 - Spark's names
    memoryUsedBytes: int  # noqa: N815


@dataclass
class FakeProgress:
    batchId: int  # noqa: N815
    numInputRows: int = 100  # noqa: N815
    processedRowsPerSecond: float = 50.0  # noqa: N815
    inputRowsPerSecond: float = float("inf")  # noqa: N815
    batchDuration: int = 2000  # noqa: N815
    durationMs: dict = field(default_factory=lambda: {"triggerExecution": 2000,  # noqa: N815
                                                       "addBatch": 1500})
    stateOperators: list = field(default_factory=lambda: [  # noqa: N815
        FakeOperator(10, 1000), FakeOperator(5, 500)])
    name: str = "urbpipe"
    timestamp: str = "2025-03-01T12:00:00.000Z"


def tx(commit: float, processed: float, sent: float, landed: float) -> dict:
    return {"commit_time": at(commit), "processed_time": at(processed), "sent_time": at(sent),
            "landed_at": at(landed)}


def test_latency_breakdown_per_leg() -> None:
    rows = [tx(0, 1, 2, 4 + i) for i in range(100)]
    rows.append({"commit_time": at(0), "processed_time": None, "sent_time": None,
                 "landed_at": at(3)})
    legs = latency_breakdown(rows)
    assert legs["commit_to_processed"] == {"p50": 1.0, "p99": 1.0, "count": 100.0}
    assert legs["processed_to_sent"]["p50"] == 1.0
    assert legs["sent_to_landed"]["p50"] == pytest.approx(51.5)
    assert legs["sent_to_landed"]["p99"] == pytest.approx(100.01)
    assert legs["commit_to_landed"]["count"] == 101
    assert latency_breakdown([]) == {}
    assert latency_breakdown([SimpleNamespace(**tx(0, 2, 3, 3))])["commit_to_processed"][
        "p99"] == 2.0


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([7.0], 0.99) == 7.0


def test_listener_joins_counts_with_progress(tmp_path: Path) -> None:
    listener = MetricsListener(tmp_path / "m" / "metrics.jsonl")
    listener.record_batch_counts(3, {"transactions": 12, "records": 40, "duplicates": 1,
                                     "gaps": 2}, 1.25)  # as the sink's on_batch calls it
    listener.record_batch_latency(3, latency_breakdown([tx(0, 1, 2, 5)]))
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(3)))
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(4, numInputRows=0)))
    first, second = listener.records
    assert (first["batch_id"], first["messages"], first["transactions"], first["records"]) == (
        3, 100, 12, 40)
    assert (first["state_rows"], first["state_memory_bytes"]) == (15, 1500)
    assert first["duration_ms"] == 2000 and first["input_rows_per_s"] is None
    assert first["counts"] == {"gaps": 2, "sink_ms": 1250}
    assert first["latency_s"]["commit_to_landed"]["p50"] == 5.0
    assert (second["transactions"], "latency_s" in second) == (0, False)
    lines = (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["batch_id"] for line in lines] == [3, 4]
    assert read_last_record(tmp_path / "m" / "metrics.jsonl")["batch_id"] == 4  # type: ignore[index]
    assert listener.last_progress_line().startswith("batch 4 | 0 msgs")  # type: ignore[union-attr]


def test_open_gaps_is_a_level_kept_over_batches_the_sink_did_not_run(tmp_path: Path) -> None:
    listener = MetricsListener(tmp_path / "metrics.jsonl")
    listener.record_batch_counts(1, {"transactions": 5, "bytes": 4096, "open_gaps": 2}, 0.5)
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(1)))
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(2, numInputRows=0)))
    listener.record_batch_counts(3, {"transactions": 1, "bytes": 100, "open_gaps": 0}, 0.5)
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(3)))
    assert [(r["bytes"], r["open_gaps"]) for r in listener.records] == [
        (4096, 2), (0, 2), (100, 0)]


def test_other_queries_are_ignored(tmp_path: Path) -> None:
    listener = MetricsListener(tmp_path / "m.jsonl", query_name="urbpipe")
    listener.onQueryProgress(SimpleNamespace(progress=FakeProgress(1, name="passthrough")))
    assert listener.records == []


def test_counts_from_many_threads_are_kept(tmp_path: Path) -> None:
    listener = MetricsListener(tmp_path / "m.jsonl")

    def sink(start: int) -> None:
        for b in range(start, start + 50):
            listener.record_batch_counts(b, {"transactions": b})

    threads = [threading.Thread(target=sink, args=(i * 50,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in range(200):
        listener.observe(FakeProgress(b))
    assert [r["transactions"] for r in listener.records] == list(range(100, 200))  # keep_last


def test_format_progress_line() -> None:
    record = {"batch_id": 12, "messages": 2000, "duration_ms": 3100,
              "processed_rows_per_s": 645.2, "transactions": 180, "records": 900,
              "bytes": 2_500_000, "duplicates": 1, "open_gaps": 2, "state_rows": 40,
              "state_memory_bytes": 3_000_000,
              "latency_s": {"commit_to_landed": {"p50": 1.25, "p99": 4.5, "count": 10}}}
    line = format_progress(record)
    assert line == ("batch 12 | 2000 msgs 3.1 s 645/s | 180 tx 900 rec 2.5 MB | dup 1 gaps 2 "
                    "| state 40 rows 3.0 MB | latency p50 1.2 s p99 4.5 s")
    assert "\n" not in line


def _scrape(listener: MetricsListener) -> str:
    assert listener.prometheus is not None
    url = f"http://127.0.0.1:{listener.prometheus.port}/metrics"
    return urllib.request.urlopen(url, timeout=5).read().decode()


class FakeStreams:
    def __init__(self) -> None:
        self.listeners: list = []

    def addListener(self, listener: object) -> None:
        self.listeners.append(listener)


def test_prometheus_endpoint_on_an_ephemeral_port(tmp_path: Path) -> None:
    spark = SimpleNamespace(streams=FakeStreams())
    listener = attach_metrics(spark, jsonl_path=tmp_path / "m.jsonl", prometheus_port=0)
    try:
        assert spark.streams.listeners == [listener]
        listener.record_batch_counts(1, {"records": 7})
        listener.record_batch_keys(1, [{"destination": "OUT1", "subscription": "COLOR",
                                        "landed": 7, "bytes": 10}])
        listener.observe(FakeProgress(1))
        body = _scrape(listener)
        assert 'urbpipe_transactions_total{destination="OUT1",subscription="COLOR"} 7.0' in body
        assert "urbpipe_records_total 7.0" in body
        assert "urbpipe_batch_state_rows 15.0" in body
        assert "urbpipe_batch_last_batch_id 1.0" in body
    finally:
        listener.close()


def test_prometheus_shows_the_jobs_maintenance(tmp_path: Path) -> None:
    """files per compacted table, the last round's end and duration, skipped tables."""
    listener = attach_metrics(SimpleNamespace(streams=FakeStreams()),
                              jsonl_path=tmp_path / "m.jsonl", prometheus_port=0)
    try:
        listener.record_batch_counts(1, {"files:records": 3, "maint_skipped": 1,
                                         "maint_round_ms": 2500,
                                         "maint_last_round_at": 1_764_000_000})
        listener.observe(FakeProgress(1))
        listener.record_batch_counts(2, {"maint_skipped": 2})
        listener.observe(FakeProgress(2))
        body = _scrape(listener)
        assert 'urbpipe_table_files{table="records"} 3.0' in body
        assert "urbpipe_maintenance_round_seconds 2.5" in body
        assert "urbpipe_maintenance_last_round_timestamp_seconds 1.764e+09" in body
        assert "urbpipe_maintenance_skipped_total 3.0" in body
        assert "urbpipe_maintenance_rounds_total 1.0" in body
    finally:
        listener.close()


def test_keys_of_one_batch_are_summed_and_their_gauges_are_the_last_calls() -> None:
    rows = [{"destination": "OUT1", "subscription": "COLOR", "landed": 2,
             "bytes": 5, "duplicates": 1, "alert_kinds": {"gap_open|warning": 1},
             "file_commits_us": {"10006/4": 10}, "gap_states": {"open": 1}, "storm": 0},
            {"destination": "OUT1", "subscription": "COLOR", "landed": 1,
             "bytes": 7, "alert_kinds": {"gap_open|warning": 2, "gap_filled|info": 1},
             "file_commits_us": {"10006/4": 4, "10006/11": 9}, "gap_states": {}, "storm": 1},
            {"destination": "OUT1", "subscription": "A", "landed": 0}]
    a, color = key_totals(rows)
    assert a == {"destination": "OUT1", "subscription": "A"}  # zeros and empties left out
    assert (color["transactions"], color["bytes"], color["duplicates"]) == (3, 12, 1)
    assert color["alert_kinds"] == {"gap_open|warning": 3, "gap_filled|info": 1}
    assert color["file_commits_us"] == {"10006/4": 10, "10006/11": 9}
    assert color["storm"] == 1 and "gap_states" not in color  # the last call's: none open


def test_input_lag_per_topic_from_the_kafka_sources_progress() -> None:
    source = SimpleNamespace(endOffset='{"a": {"0": 10, "1": 5}, "b": {"0": 3}}',
                             latestOffset={"a": {"0": 12, "1": 5}, "b": {"0": 3}})
    progress = SimpleNamespace(sources=[source, SimpleNamespace(endOffset=None,
                                                                latestOffset=None)])
    assert input_lag(progress) == {"a": 2, "b": 0}
    assert input_lag(SimpleNamespace(sources=None)) == {}
