"""``urbpipe status`` over real Delta tables, a fake checkpoint and a metrics file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import Kafka, Settings, Topics
from pipeline.errors import BrokerUnreachable
from pipeline.ops.cli import CLOSED_PIPE, main
from pipeline.ops.lake import Lake
from pipeline.ops.newest import Files
from pipeline.ops.status import KeyStatus, build_report, format_report, source_end_offsets
from tests.unit.ops.conftest import WriteTable, at, gap_row, transaction
from tests.unit.ops.test_lake_checkpoint import write_checkpoint


@pytest.fixture
def landed(ops_settings: Settings, write_table: WriteTable, tmp_path: Path) -> Path:
    """Two subscriptions: COLOR restarted (epoch 2) with an open gap, EMPLOYEE clean."""
    write_table("transactions", [
        transaction("COLOR", 0, landed=1), transaction("COLOR", 40, landed=2),
        transaction("COLOR", 41, landed=3), transaction("COLOR", 3, epoch=2, landed=20),
        transaction("EMPLOYEE", 9, landed=5)])
    write_table("gaps", [gap_row("COLOR", 2, "requested", 21, epoch=2),
                         gap_row("EMPLOYEE", 4, "filled", 4)])
    write_table("status_events", [
        {"destination": "OUT1", "subscription": "", "rt": "", "st": "REST", "rsp": 0,
         "subc": 0, "time": at(15), "received_at": at(15)},
        {"destination": "OUT1", "subscription": "COLOR", "rt": "TRAN", "st": "TRSP",
         "rsp": 131, "subc": 35, "token": "URBPIPE", "tsnr": 2, "time": at(22),
         "received_at": at(22)}])
    write_checkpoint(Path(ops_settings.location(ops_settings.stream.checkpoint_dir)),
                     {7: {"urb.out1": {"0": 90, "1": 10}, "urb.replies": {"0": 4}}}, {7})
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"batch_id": 6, "state_rows": 1}) + "\n"
                       + json.dumps({"batch_id": 7, "state_rows": 2,
                                     "state_memory_bytes": 4096}) + "\n")
    return metrics


def test_report_per_key(ops_settings: Settings, landed: Path) -> None:
    ends = {"urb.out1": {0: 100, 1: 10}, "urb.replies": {0: 4}}
    report = build_report(ops_settings, Lake(ops_settings), end_offsets=ends,
                          metrics_path=str(landed), now=at(30))
    keys = {(k.destination, k.subscription): k for k in report.keys}
    color = keys[("OUT1", "COLOR")]
    assert (color.epoch, color.last_tsnr) == (2, 3)
    assert color.freshness_seconds == pytest.approx(13.0)  # now − newest commit (20 − 3)
    assert (color.state, color.lag_messages, color.lag_seconds) == ("behind", 10, None)
    assert [g["ref"] for g in color.gaps] == ["OUT1/COLOR/2:2"]
    assert color.last_status is not None
    assert color.last_status["st"] == "TRSP"
    assert "not found in the resend buffer" in color.last_status["error"]
    employee = keys[("OUT1", "EMPLOYEE")]
    assert (employee.epoch, employee.last_tsnr, employee.gaps) == (1, 9, [])
    assert employee.last_status is not None and employee.last_status["st"] == "REST"
    assert report.state == {"batch_id": 7, "state_rows": 2, "state_memory_bytes": 4096,
                            "timestamp": None, "duration_ms": None}
    # the requested gap, and urb.out1 with two partitions (one per source topic is checked)
    assert report.checkpoint_batch == 7 and report.problems == 2
    assert report.topic_partitions == {"urb.out1": 2, "urb.replies": 1, "urb.control": None}
    assert report.topic_problem is not None and "urb.out1 has 2 partitions" in \
        report.topic_problem
    text = format_report(report)
    assert "OUT1/COLOR: behind by 10 messages / ? seconds; epoch 2 tsnr 3" in text
    assert "urb.out1[0] (OUT1): end 100 processed 90 lag 10" in text
    assert "topics: urb.out1 2 partitions, urb.replies 1 partition" in text
    assert "PROBLEM: topic urb.out1 has 2 partitions" in text
    single = build_report(ops_settings, Lake(ops_settings), metrics_path=str(landed),
                          end_offsets={"urb.out1": {0: 100}, "urb.replies": {0: 4}}, now=at(30))
    assert single.topic_problem is None and single.problems == 1


def test_status_cli_json_without_broker(conf_file: Path, landed: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--conf-file", str(conf_file), "--no-kafka", "--json",
                 "--metrics-file", str(landed)])
    assert code == 1  # COLOR has a requested gap
    data = json.loads(capsys.readouterr().out)
    assert {(k["destination"], k["subscription"]) for k in data["keys"]} == {
        ("OUT1", "COLOR"), ("OUT1", "EMPLOYEE")}
    assert all(p["end_offset"] is None and p["lag"] is None for p in data["partitions"])
    assert data["state"]["state_rows"] == 2


def test_status_with_unreachable_broker_still_reports_then_exits_3(
        conf_file: Path, landed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--conf-file", str(conf_file), "--kafka-timeout", "1"])
    out, err = capsys.readouterr()
    assert code == 3
    assert "OUT1/COLOR" in out
    assert err.startswith("error: broker 127.0.0.1:1 unreachable") and err.count("\n") == 1


def test_status_without_lake_exits_3(conf_file: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--conf-file", str(conf_file), "--no-kafka"]) == 3
    assert "no Delta tables" in capsys.readouterr().err


def test_bad_conf_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stream:\n  shuffle_partitions: 0\n")
    assert main(["status", "--conf-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "shuffle_partitions" in err and err.count("\n") == 1


# -- partition counts of the topics the job reads (ordering is checked, never assumed) ---------

@pytest.fixture
def clean_lake(write_table: WriteTable) -> None:
    """Landed transactions and a filled gap: nothing for an operator to look at."""
    write_table("transactions", [transaction("COLOR", 1), transaction("COLOR", 2)])
    write_table("gaps", [gap_row("COLOR", 2, "filled", 4)])


def _cluster(monkeypatch: pytest.MonkeyPatch, ends: dict[str, dict[int, int]]) -> None:
    monkeypatch.setattr("pipeline.ops.status.source_end_offsets",
                        lambda _settings, timeout: ends)


@pytest.mark.usefixtures("clean_lake")
def test_status_exits_0_when_every_source_topic_has_one_partition(
        conf_file: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _cluster(monkeypatch, {"urb.out1": {0: 2}, "urb.replies": {0: 0}, "urb.control": {0: 0}})
    assert main(["status", "--conf-file", str(conf_file)]) == 0
    out = capsys.readouterr().out
    assert "topics: urb.out1 1 partition, urb.replies 1 partition, urb.control 1 partition" in out
    assert "PROBLEM" not in out and "problems: none" in out


@pytest.mark.usefixtures("clean_lake")
def test_a_topic_with_three_partitions_alone_makes_status_exit_1(
        conf_file: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _cluster(monkeypatch, {"urb.out1": {0: 1, 1: 0, 2: 1}, "urb.replies": {0: 0},
                           "urb.control": {}})
    assert main(["status", "--conf-file", str(conf_file)]) == 1
    out = capsys.readouterr().out
    assert "topics: urb.out1 3 partitions, urb.replies 1 partition, urb.control missing" in out
    assert "    PROBLEM: topic urb.out1 has 3 partitions: " in out
    assert "problems: 1 (0 gap(s) open or unacknowledged, 1 topic(s) with several " \
           "partitions)" in out
    assert main(["status", "--conf-file", str(conf_file), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == 1
    assert data["topic_partitions"] == {"urb.out1": 3, "urb.replies": 1, "urb.control": None}
    assert data["topic_problem"].startswith("topic urb.out1 has 3 partitions: ")


@pytest.mark.usefixtures("clean_lake")
def test_each_topic_with_several_partitions_is_one_problem(
        conf_file: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _cluster(monkeypatch, {"urb.out1": {0: 1, 1: 0}, "urb.replies": {0: 0, 1: 0, 2: 0},
                           "urb.control": {0: 0}})
    assert main(["status", "--conf-file", str(conf_file), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == 2
    assert data["topic_problem"].startswith(
        "topic urb.out1 has 2 partitions, topic urb.replies has 3 partitions: ")


def test_with_a_pattern_status_asks_for_the_topics_it_matches_now(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(topics=Topics(outputs={}, output_pattern=r"urb\.out\d",
                                      pattern_destination="OUT1"))
    asked: list[list[str]] = []
    monkeypatch.setattr("pipeline.ops.status.cluster_partitions", lambda _s, _t: {
        "urb.out1": 1, "urb.out2": 3, "urb.requests": 4, "urb.replies": 1})
    monkeypatch.setattr("pipeline.ops.kafka_offsets.end_offsets",
                        lambda _s, topics, timeout: asked.append(list(topics)) or {})
    source_end_offsets(settings, timeout=1)
    assert asked == [["urb.out1", "urb.out2", "urb.replies", "urb.control"]]


def test_with_a_pattern_and_no_broker_status_reports_it_unreachable() -> None:
    settings = Settings(kafka=Kafka(bootstrap_servers="127.0.0.1:1"),
                        topics=Topics(outputs={}, output_pattern=r"urb\.out\d",
                                      pattern_destination="OUT1"))
    with pytest.raises(BrokerUnreachable, match=r"^cannot reach Kafka at 127\.0\.0\.1:1"):
        source_end_offsets(settings, timeout=1)


# -- up to date, idle, behind; the conf's metrics file; bounded reads; a closed pipe ----------

@pytest.fixture
def two_keys(ops_settings: Settings, write_table: WriteTable, tmp_path: Path) -> Path:
    """COLOR and EMPLOYEE landed; the job's newest word: EMPLOYEE idle (STAT answered)."""
    write_table("transactions", [transaction("COLOR", 5, landed=10),
                                 transaction("EMPLOYEE", 7, landed=12)])
    metrics = tmp_path / "metrics.jsonl"
    key = {"destination": "OUT1", "transactions": 0, "gap_states": {}, "storm": 0}
    metrics.write_text("\n".join(json.dumps(r) for r in [
        {"batch_id": 1, "keys": [{**key, "subscription": "COLOR", "idle": 1},
                                 {**key, "subscription": "EMPLOYEE", "idle": 0}]},
        {"batch_id": 2, "keys": [{**key, "subscription": "EMPLOYEE", "idle": 1}]},
        {"batch_id": 3, "keys": []}]) + "\n")
    return metrics


def _report(settings: Settings, metrics: Path, out1_end: int, processed: int,
            times: dict | None = None) -> dict[tuple[str, str], KeyStatus]:
    write_checkpoint(Path(settings.location(settings.stream.checkpoint_dir)),
                     {4: {"urb.out1": {"0": processed}}}, {4})
    asked: list[dict] = []

    def message_times(waiting: dict) -> dict:
        asked.append(waiting)
        return times or {}

    report = build_report(settings, Lake(settings), metrics_path=str(metrics), now=at(100),
                          end_offsets={"urb.out1": {0: out1_end}}, message_times=message_times)
    assert asked == ([{("urb.out1", 0): processed}] if out1_end > processed else [])
    return {(k.destination, k.subscription): k for k in report.keys}


def test_up_to_date_idle_and_behind_are_told_apart(ops_settings: Settings,
                                                   two_keys: Path) -> None:
    keys = _report(ops_settings, two_keys, 50, 50)
    color, employee = keys[("OUT1", "COLOR")], keys[("OUT1", "EMPLOYEE")]
    # each key's newest word (COLOR: batch 1, EMPLOYEE: batch 2), nothing waiting on the topic
    assert color.state == employee.state == "idle" and color.idle is True
    assert color.describe() == "idle (the replicator's STAT answer: nothing sent since)"
    assert employee.freshness_seconds == pytest.approx(91)
    keys = _report(ops_settings, two_keys, 80, 50, {("urb.out1", 0): int(at(40).timestamp()
                                                                          * 1000)})
    color = keys[("OUT1", "COLOR")]
    assert (color.state, color.lag_messages, color.lag_seconds) == ("behind", 30, 60.0)
    assert color.describe() == "behind by 30 messages / 60 seconds"


def test_without_the_jobs_word_nothing_waiting_is_up_to_date(ops_settings: Settings,
                                                             two_keys: Path) -> None:
    two_keys.write_text("")
    keys = _report(ops_settings, two_keys, 50, 50)
    assert {k.state for k in keys.values()} == {"up to date"}
    assert all(k.lag_seconds == 0 for k in keys.values())


def test_status_reads_the_metrics_file_conf_names(conf_file: Path, two_keys: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    conf_file.write_text(conf_file.read_text().replace(
        "stream:\n", f"stream:\n  metrics_file: {two_keys}\n"))
    two_keys.write_text(two_keys.read_text() + json.dumps(
        {"batch_id": 9, "state_rows": 77, "keys": []}) + "\n")
    assert main(["status", "--conf-file", str(conf_file), "--no-kafka", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"]["state_rows"] == 77
    assert {k["subscription"]: k["idle"] for k in data["keys"]} == {"COLOR": True,
                                                                    "EMPLOYEE": True}


def test_status_reads_a_few_files_not_whole_tables(ops_settings: Settings,
                                                   write_table: WriteTable, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty appends (forty files) per table: the newest transaction and status of each key
    come from the files the log's statistics point at."""
    for n in range(1, 41):
        write_table("transactions", [transaction("COLOR" if n % 2 else "EMPLOYEE", n)])
        write_table("status_events", [{"destination": "OUT1", "subscription": "COLOR",
                                       "st": "SUBS", "tsnr": n, "received_at": at(n)}])
    read: list[str] = []
    rows = Files.rows

    def counting(self: Files, path: str) -> list[dict]:
        read.append(path)
        return rows(self, path)

    monkeypatch.setattr(Files, "rows", counting)
    report = build_report(ops_settings, Lake(ops_settings), end_offsets=None,
                          metrics_path=str(tmp_path / "none.jsonl"), now=at(100))
    keys = {(k.destination, k.subscription): k for k in report.keys}
    assert (keys[("OUT1", "COLOR")].last_tsnr, keys[("OUT1", "EMPLOYEE")].last_tsnr) == (39, 40)
    assert keys[("OUT1", "COLOR")].last_status["tsnr"] == 40  # type: ignore[index]
    assert len(read) <= 4, f"{len(read)} files read of 80"
    assert len(set(read)) == len(read), "a file read twice"


def test_a_closed_pipe_ends_status_quietly(conf_file: Path, landed: Path) -> None:
    """`urbpipe status --json | head`: the reader goes away before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.ops.cli", "status", "--conf-file",
                             str(conf_file), "--no-kafka", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == CLOSED_PIPE and err == ""


def test_the_oldest_waiting_messages_time_stamp_comes_from_the_broker(
        test_settings: Settings, fresh_topic: str) -> None:
    """One message read per partition, at the offset the job has not processed yet."""
    from confluent_kafka import Producer

    from pipeline.ops.kafka_offsets import message_times

    producer = Producer(test_settings.kafka.confluent())
    for i, stamp in enumerate((1_000_000, 2_000_000, 3_000_000)):
        producer.produce(fresh_topic, value=b"m", partition=0, timestamp=stamp + i)
    producer.produce(fresh_topic, value=b"m", partition=1, timestamp=5_000_000)
    assert producer.flush(30) == 0
    got = message_times(test_settings, {(fresh_topic, 0): 1, (fresh_topic, 1): 0}, timeout=20)
    assert got == {(fresh_topic, 0): 2_000_001, (fresh_topic, 1): 5_000_000}
    assert message_times(test_settings, {}) == {}
