"""The steady-state size of a table's Delta log and the start-up warning about it
(pipeline/spark/land/log_growth.py), engine-free."""

from __future__ import annotations

import pytest

from pipeline.config import ConfigError, Settings, interval_ms, load_settings
from pipeline.spark.land.log_growth import (
    WARN_ADDED_MS,
    WARN_COMMIT_LISTS,
    added_commit_ms,
    advice,
    commit_lists,
    retained_commits,
)
from pipeline.spark.land.tables import log_retention, table_properties
from tests.conftest import TEST_CONF


def _settings(**stream: object) -> Settings:
    """Delta's own log store unless said: the one whose listing grows with the log."""
    base = load_settings(TEST_CONF, env={})
    stream = {"delta_log_store": "hadoop", **stream}
    return base.model_copy(update={"stream": base.stream.model_copy(update=stream)})


def test_the_projects_stores_are_not_warned_about() -> None:
    """The project's stores list from the version asked for (decisions 0017 and 0019), on a
    local lake and on S3: the default, and quiet; Delta's own on S3 is warned about."""
    assert load_settings(TEST_CONF, env={}).stream.delta_log_store == "probing"
    assert advice(_settings(delta_log_retention_days=30, delta_log_store="probing")) is None
    s3 = _settings(delta_log_retention_days=30, delta_log_store="probing",
                   lake_dir="s3a://lake/adabas")
    assert advice(s3) is None
    deltas = advice(_settings(delta_log_retention_days=30, lake_dir="s3a://lake/adabas"))
    assert deltas is not None and "LIST requests" in deltas


@pytest.mark.parametrize(("text", "ms"), [("5 seconds", 5000), ("500 ms", 500),
                                          ("1 minute", 60_000), ("2.5 s", 2500),
                                          ("10 min", 600_000)])
def test_intervals_in_the_forms_conf_accepts(text: str, ms: float) -> None:
    assert interval_ms(text) == ms


def test_an_interval_without_a_known_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="not an interval"):
        interval_ms("5 hours")


def test_the_defaults_keep_half_a_million_commits_and_say_so() -> None:
    assert retained_commits(30, 5000) == 518_400
    text = advice(_settings(delta_log_retention_days=30, trigger_interval="5 seconds"))
    assert text is not None and "518,400 commits" in text
    assert "41.5 s" in text and "stream.delta_log_retention_days" in text  # 518,400 x 4 x 20 us


def test_the_trigger_the_job_runs_with_counts_not_conf_s() -> None:
    settings = _settings(delta_log_retention_days=1, trigger_interval="1 second")
    assert advice(settings) is not None
    assert advice(settings, "1 minute") is None  # 1,440 commits: ~115 ms


def test_hours_of_retention_at_a_seconds_trigger_stay_quiet() -> None:
    settings = _settings(delta_log_retention_days=0.25, trigger_interval="5 seconds")
    assert retained_commits(0.25, 5000) == 4320
    assert added_commit_ms(4320) < WARN_ADDED_MS and advice(settings) is None


def test_an_s3_lake_is_warned_in_list_requests_per_commit() -> None:
    s3 = {"lake_dir": "s3a://lake/adabas", "trigger_interval": "5 seconds"}
    text = advice(_settings(delta_log_retention_days=30, **s3))
    assert text is not None and "518,400 commits" in text
    assert "~1,037 S3 LIST requests" in text and "ms per 1,000 files" not in text
    # 6 hours at 5 s: 4,320 commits, 9 requests per commit: quiet on S3, as on a local lake
    assert commit_lists(4320) == 9 <= WARN_COMMIT_LISTS
    assert advice(_settings(delta_log_retention_days=0.25, **s3)) is None
    # a day: 17,280 commits, 35 requests per commit
    assert "~35 S3 LIST requests" in (advice(_settings(delta_log_retention_days=1, **s3)) or "")


def test_a_fraction_of_a_day_reaches_delta_as_hours() -> None:
    assert log_retention(30) == "interval 30 days"
    assert log_retention(0.25) == "interval 6 hours"
    assert log_retention(0.01) == "interval 1 hours"
    props = table_properties(_settings(delta_log_retention_days=0.5), "records")
    assert props["delta.logRetentionDuration"] == "interval 12 hours"


def test_less_than_an_hour_is_refused_by_conf(tmp_path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(TEST_CONF.read_text() + "\n")
    with pytest.raises(ConfigError, match="delta_log_retention_days"):
        load_settings(conf, env={"URBPIPE__STREAM__DELTA_LOG_RETENTION_DAYS": "0.01"})
