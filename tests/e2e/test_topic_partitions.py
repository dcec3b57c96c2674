"""Ordering is checked, never assumed, against the real broker (conf/test.yaml, port 19092):
the deployed job refuses a source topic with several partitions before any Spark query, in one
line; ``urbpipe status`` reports it; the local broker and the demo's reset remake such a topic
(an old .kafka from before the check) with one partition."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import write_deltalake

from devtools import broker
from pipeline.config import Settings, load_settings
from pipeline.ops.cli import main as urbpipe
from pipeline.ops.topic_check import check_source_topics, cluster_partitions
from pipeline.spark.land.tables import arrow_schema, table_path

ROOT = Path(__file__).resolve().parents[2]
TEST_CONF = ROOT / "conf" / "test.yaml"
WHY = ("a destination's messages keep their order only within one partition; give each "
       "destination a topic with one partition (README: How replicator output reaches Kafka)")


MakeConf = Callable[[dict[str, int]], tuple[Settings, Path]]


@pytest.fixture
def make_conf(kafka_bootstrap: str, tmp_path: Path) -> Iterator[MakeConf]:
    """A conf on fresh topics, the ones named (out1, out2, replies, requests …) made first with
    that many partitions, as an old broker or a careless connector set-up would have; the rest
    made by ``broker.create_topics`` (which never remakes). The topics go after the test."""
    made: list[Settings] = []

    def make(partitions: dict[str, int]) -> tuple[Settings, Path]:
        raw = yaml.safe_load(TEST_CONF.read_text())
        prefix = f"parts.{uuid.uuid4().hex[:6]}"
        outputs = {f"{prefix}.out1": "OUT1"}
        if "out2" in partitions:
            outputs[f"{prefix}.out2"] = "OUT2"
        raw["topics"] = {"outputs": outputs, **{k: f"{prefix}.{k}" for k in
                                                ("replies", "requests", "alerts", "control")}}
        raw["stream"].update(lake_dir=str(tmp_path / "lake"),
                             checkpoint_dir=str(tmp_path / "ck"),
                             metrics_file=str(tmp_path / "metrics.jsonl"))
        raw["devtools"]["local_broker"]["data_dir"] = str(ROOT / ".run" / "test-kafka")
        path = tmp_path / "conf.yaml"
        path.write_text(yaml.safe_dump(raw))
        settings = load_settings(path, env={})
        made.append(settings)
        admin = AdminClient(settings.kafka.confluent())
        for fut in admin.create_topics([NewTopic(f"{prefix}.{k}", num_partitions=n,
                                                 replication_factor=1)
                                        for k, n in partitions.items()]).values():
            fut.result(30)
        broker.create_topics(settings)
        return settings, path

    yield make
    for settings in made:
        AdminClient(settings.kafka.confluent()).delete_topics(settings.topics.all_created())


def run_job(conf: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file",
                           str(conf)], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT)
    return done, time.monotonic() - started


def test_the_job_refuses_an_output_topic_with_three_partitions_in_one_line(
        make_conf: MakeConf, tmp_path: Path) -> None:
    settings, conf = make_conf({"out1": 3})
    [topic] = settings.topics.outputs
    done, seconds = run_job(conf)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [f"error: topic {topic} has 3 partitions: {WHY}"]
    assert done.stdout == ""
    assert seconds < 30, f"{seconds:.1f} s: the check runs before any Spark session or query"
    assert not (tmp_path / "ck").exists() and not (tmp_path / "lake").exists()


def test_several_topics_with_several_partitions_are_named_in_one_line(make_conf: MakeConf,
                                                                    ) -> None:
    settings, conf = make_conf({"out1": 1, "out2": 3, "replies": 2, "requests": 4})
    out2 = list(settings.topics.outputs)[1]
    done, _ = run_job(conf)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"error: topic {out2} has 3 partitions, topic {settings.topics.replies} has 2 "
        f"partitions: {WHY}"]  # requests has 4 partitions: the job does not read it


def test_status_shows_the_partition_counts_and_reports_the_topic(
        make_conf: MakeConf, capsys: pytest.CaptureFixture[str]) -> None:
    settings, conf = make_conf({"out1": 3})
    [topic] = settings.topics.outputs
    schema = arrow_schema("transactions")
    write_deltalake(table_path(settings, "transactions"), pa.Table.from_pylist([], schema=schema))
    assert urbpipe(["status", "--conf-file", str(conf), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["topic_partitions"] == {topic: 3, settings.topics.replies: 1,
                                        settings.topics.control: 1}
    assert data["topic_problem"] == f"topic {topic} has 3 partitions: {WHY}"
    assert data["problems"] == 1
    assert {(p["topic"], p["partition"]) for p in data["partitions"]} >= {
        (topic, 0), (topic, 1), (topic, 2)}


def test_broker_start_remakes_source_topics_an_older_version_made(
        make_conf: MakeConf, capfd: pytest.CaptureFixture[str]) -> None:
    settings, _ = make_conf({"out1": 2, "replies": 2, "control": 2, "requests": 2})
    assert broker.start(settings).startswith("broker already running")
    assert "with one partition" in capfd.readouterr().err
    counts = cluster_partitions(settings)
    assert {t: counts[t] for t in settings.source_topics()} == dict.fromkeys(
        settings.source_topics(), 1)
    assert counts[settings.topics.requests] == 2  # not read by the job: left as it was
    check_source_topics(settings)  # the job would start


def test_the_demo_reset_leaves_single_partition_source_topics(make_conf: MakeConf) -> None:
    from devtools.demo import reset

    settings, _ = make_conf({"out1": 3, "replies": 2})
    reset(settings)
    counts = cluster_partitions(settings)
    assert [counts.get(t) for t in settings.source_topics()] == [1, 1, 1]
    check_source_topics(settings)
