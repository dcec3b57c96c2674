"""The pipeline benchmark's command line (benchmarks/bench_pipeline.py): settings it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.bench_pipeline import parse_args, run_settings, spark_overrides


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
