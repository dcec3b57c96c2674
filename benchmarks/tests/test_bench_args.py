"""The pipeline benchmark's command line (benchmarks/bench_pipeline.py): settings it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.bench_pipeline import clear_run, parse_args, run_settings, spark_overrides


def test_spark_conf_pairs_become_the_spark_sections_conf() -> None:
    args = parse_args(["--spark-conf", "spark.eventLog.enabled=true",
                       "--spark-conf", "spark.eventLog.dir = file:///tmp/ev",
                       "--local-file-system", "hadoop"])
    assert spark_overrides(args) == {
        "local_file_system": "hadoop",
        "conf": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file:///tmp/ev"}}


def test_no_spark_option_overrides_nothing() -> None:
    assert spark_overrides(parse_args([])) is None


@pytest.mark.parametrize("bad", ["spark.eventLog.enabled", "=true"])
def test_a_pair_without_key_or_equals_sign_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        spark_overrides(parse_args(["--spark-conf", bad]))


def test_spark_conf_is_added_to_the_templates_own(tmp_path: Path) -> None:
    settings, conf = run_settings(tmp_path, "bench.t",
                                  spark={"conf": {"spark.eventLog.enabled": "true"}})
    written = yaml.safe_load(conf.read_text())["spark"]["conf"]
    assert written["spark.eventLog.enabled"] == "true"
    # the template's setting stays (the bench reads every batch's progress through it)
    assert written["spark.sql.streaming.numRecentProgressUpdates"] == "2000"
    assert settings.spark.conf["spark.eventLog.enabled"] == "true"


def test_a_finished_runs_lakes_and_checkpoints_go_and_its_figures_stay(tmp_path: Path) -> None:
    for name in ("lake/raw", "ck/offsets", "ck-raw/commits"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "part-0.parquet").write_bytes(b"x" * 1000)
    for name in ("conf.yaml", "load.json", "metrics.jsonl", "results.json"):
        (tmp_path / name).write_text("{}")
    said = clear_run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "conf.yaml", "load.json", "metrics.jsonl", "results.json"]
    assert "0 MB" in said and "--keep-lake" in said  # 3,000 bytes, rounded
    assert clear_run(tmp_path).startswith("run data removed (0 MB")  # twice: nothing left


def test_a_run_that_reused_a_load_is_reused_through_to_the_topics_it_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from benchmarks import bench_pipeline

    monkeypatch.setattr(bench_pipeline, "BENCH_DIR", tmp_path)
    for run, load in (("first", {"messages": 5}),                 # a load.json before "topics"
                      ("second", {"messages": 5, "topics": "bench.first"})):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "load.json").write_text(json.dumps(load))
    assert bench_pipeline.reused_topics("first") == "bench.first"
    assert bench_pipeline.reused_topics("second") == "bench.first"
