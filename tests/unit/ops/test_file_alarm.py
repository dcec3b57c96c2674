"""FileAlarm (pipeline.spark.land.file_watch): when the job counts its tables' files and
which counts alert, without Spark."""

from __future__ import annotations

from pipeline.spark.land.file_watch import KIND, FileAlarm

DAY_MS = 86_400_000
NOON = 1_795_651_200_000 - DAY_MS // 2  # 2026-11-25 12:00 UTC


def test_first_count_one_interval_after_start_then_every_interval() -> None:
    alarm = FileAlarm(limit=10, every_s=60, now=1000)
    assert [alarm.due(t) for t in (1000, 1059, 1060, 1061, 1119, 1120)] == [
        False, False, True, False, False, True]


def test_a_table_over_the_limit_alerts_once_per_day() -> None:
    alarm = FileAlarm(limit=10, every_s=60, now=0)
    first = alarm.alerts({"records": 11, "images": 10, "gaps": 3}, NOON)
    assert [(a["kind"], a["severity"], a["details"]["table"]) for a in first] == [
        (KIND, "warning", "records")]
    assert first[0]["idempotency_key"] == "table_files_high|records|2026-11-25"
    assert "records has 11 data files (more than 10)" in first[0]["message"]
    assert first[0]["subscription"] is None and first[0]["at_ms"] == NOON
    assert alarm.alerts({"records": 50}, NOON + 3_600_000) == []           # same day
    again = alarm.alerts({"records": 50, "images": 11}, NOON + DAY_MS)     # next day
    assert [a["idempotency_key"] for a in again] == [
        "table_files_high|images|2026-11-26", "table_files_high|records|2026-11-26"]


def test_a_restart_repeats_the_days_key_so_consumers_drop_the_repeat() -> None:
    one, two = FileAlarm(10, 60, 0), FileAlarm(10, 60, 0)
    assert ([a["idempotency_key"] for a in one.alerts({"t": 11}, NOON)]
            == [a["idempotency_key"] for a in two.alerts({"t": 99}, NOON + 60_000)])


def test_the_watchs_alerts_go_out_as_the_jobs_other_alerts(monkeypatch) -> None:
    """FileWatch sends through kafka_out.send_requests_and_alerts: topics.alerts, keyed and
    headed by the idempotency key, the details as JSON."""
    import json

    import pipeline.spark.land.kafka_out as kafka_out
    from pipeline.config import load_settings
    from pipeline.spark.land.file_watch import FileWatch

    sent: list[tuple] = []

    class FakeOut:
        def __init__(self, settings) -> None:
            pass

        def send(self, topic: str, key: str, value: bytes, headers: dict) -> None:
            sent.append((topic, key, json.loads(value), headers))

        def flush(self) -> None:
            sent.append("flush")

        def page(self, alerts: list) -> None:  # Alertmanager, with alertmanager.url
            sent.append(("page", [a["kind"] for a in alerts]))

    monkeypatch.setattr(kafka_out, "KafkaOut", FakeOut)
    settings = load_settings("conf/test.yaml", env={})
    alert = FileAlarm(10, 60, 0).alerts({"records": 11}, NOON)
    FileWatch(settings, ["records"])._producer()(alert)
    key = "table_files_high|records|2026-11-25"
    assert sent == [(settings.topics.alerts, key, {**alert[0]},
                     {"idempotency_key": key, "kind": KIND}), "flush", ("page", [KIND])]
