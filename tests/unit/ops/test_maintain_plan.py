"""``urbpipe maintain`` without Spark: which tables, the vacuum retention rule, the table
properties every table gets, the dry run, the summary and the exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.config import Maintenance, Settings, parse_size
from pipeline.errors import UsageError
from pipeline.ops.cli import main
from pipeline.ops.maintain_plan import (
    MISSING,
    TableRun,
    human_bytes,
    plan,
    summary,
    vacuum_retention_hours,
)
from pipeline.spark.land.tables import DIRECT_TABLES, SCHEMAS, table_properties
from pipeline.spark.typed.tables import job_tables, select_tables, typed_properties
from tests.unit.ops.conftest import WriteTable, transaction


def _with(settings: Settings, **maintenance: object) -> Settings:
    return settings.model_copy(update={
        "maintenance": settings.maintenance.model_copy(update=maintenance)})


def test_job_tables_are_the_raw_ones_then_each_layouts_typed_ones(test_settings) -> None:
    names = job_tables(test_settings)
    assert names[:len(SCHEMAS)] == list(SCHEMAS)
    assert {"changes_color_4", "current_color_4", "tombstones_color_4",
            "current_employee_11"} <= set(names[len(SCHEMAS):])
    assert len(names) == len(set(names))


def test_tables_chosen_by_option_else_conf_in_the_jobs_order(test_settings) -> None:
    assert select_tables(test_settings) == job_tables(test_settings)
    assert select_tables(test_settings, ["current_color_4", "records"]) == [
        "records", "current_color_4"]
    conf = _with(test_settings, tables=["images"])
    assert select_tables(conf) == ["images"]
    assert select_tables(conf, ["all"]) == job_tables(test_settings)
    with pytest.raises(UsageError, match="recrods"):
        select_tables(test_settings, ["recrods"])


def test_vacuum_retention_is_never_shorter_than_any_floor(test_settings) -> None:
    assert vacuum_retention_hours(test_settings) == 168  # Delta's 7 days
    assert vacuum_retention_hours(_with(test_settings, vacuum_retention_hours=200)) == 200
    # a batch may run 300.5 h before its direct-writer files are committed
    assert vacuum_retention_hours(_with(test_settings, commit_wait_hours=300.5)) == 301
    longer = test_settings.model_copy(update={"stream": test_settings.stream.model_copy(
        update={"delta_deleted_file_retention_days": 10})})
    assert vacuum_retention_hours(longer) == 240
    with pytest.raises(ValidationError):
        Maintenance(vacuum_retention_hours=24)  # shorter than Delta's floor: refused


def test_sizes_parse_in_binary_units() -> None:
    assert parse_size("128MB") == 128 << 20
    assert parse_size("512 kb") == 512 << 10
    assert parse_size("1GB") == 1 << 30
    assert Maintenance(target_file_size="64MB").target_file_bytes == 64 << 20
    for bad in ("12 parsecs", "", "-1MB"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValidationError):
        Maintenance(target_file_size="100KB")  # below 1MB


def test_every_table_gets_the_lifetime_properties(test_settings) -> None:
    for table in SCHEMAS:
        props = table_properties(test_settings, table)
        assert props["delta.logRetentionDuration"] == "interval 30 days"
        assert props["delta.deletedFileRetentionDuration"] == "interval 7 days"
        # the direct writer's commits never compact inside a batch
        assert props["delta.autoOptimize.autoCompact"] == str(
            table not in DIRECT_TABLES).lower()
    current = typed_properties(test_settings, "current_color_4")
    assert current["delta.enableChangeDataFeed"] == "true"
    assert current["delta.checkpointInterval"] == "50"
    # a local lake: the direct writer's tasks commit the typed tables, no Spark hook runs
    assert current["delta.autoOptimize.autoCompact"] == "false"
    spark_written = test_settings.model_copy(update={"stream": test_settings.stream.model_copy(
        update={"raw_writer": "spark"})})
    assert typed_properties(spark_written, "current_color_4")[
        "delta.autoOptimize.autoCompact"] == "true"
    assert "delta.enableChangeDataFeed" not in typed_properties(test_settings,
                                                                "changes_color_4")
    off = spark_written.model_copy(update={"stream": spark_written.stream.model_copy(
        update={"change_feed": False, "delta_auto_compact": False})})
    assert typed_properties(off, "current_color_4") == {
        "delta.logRetentionDuration": "interval 30 days",
        "delta.deletedFileRetentionDuration": "interval 7 days",
        "delta.autoOptimize.autoCompact": "false", "delta.checkpointInterval": "50",
        "delta.enableChangeDataFeed": "false"}


def test_summary_has_a_line_per_table_and_totals() -> None:
    runs = [TableRun("records", 120, 3 << 20, 2, 2 << 20, 4.25, note="a note"),
            TableRun("current_color_4", 30, 1 << 20, problem="a concurrent commit won"),
            TableRun("history_color_4", 0, 0, problem=MISSING)]
    lines = summary(runs, 9.5)
    assert lines[0] == "records: 120 → 2 files, 3.0 MB → 2.0 MB, 4.2 s; a note"
    assert "skipped: a concurrent commit won" in lines[1]
    assert lines[-1] == "maintained 1 of 3 tables in 9.5 s: 120 → 2 files; 2 skipped"
    assert [r.failed for r in runs] == [False, True, False]
    assert human_bytes(999) == "999 B" and human_bytes(5 << 30) == "5.0 GB"


def test_plan_describes_each_table(test_settings) -> None:
    chosen = plan(test_settings, ["records", "gaps"])
    assert chosen.tables == ("records", "gaps") and chosen.retention_hours == 168
    assert chosen.describe() == [
        "records: compact files smaller than 128.0 MB into files of about 128.0 MB; vacuum "
        "unreferenced files older than 168 h; checkpoint the log",
        "gaps: compaction left to Delta's auto compaction; vacuum unreferenced files older "
        "than 168 h; checkpoint the log"]


def test_dry_run_prints_the_plan_and_starts_nothing(
        conf_file: Path, write_table: WriteTable, capsys: pytest.CaptureFixture[str]) -> None:
    write_table("transactions", [transaction("COLOR", 1)])
    assert main(["maintain", "--conf-file", str(conf_file), "--dry-run",
                 "--tables", "transactions,gaps"]) == 0  # gaps: not there yet
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("would maintain 2 tables, target file size 128.0 MB, vacuum retention "
                      "168 h:")
    assert out[1].startswith("  transactions: compact files smaller than 128.0 MB")
    assert out[2] == "  gaps: no such table yet, skip"


def test_maintain_usage_and_lake_errors(conf_file: Path, write_table: WriteTable,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintain", "--help"]) == 0
    assert "--dry-run" in capsys.readouterr().out
    assert main(["maintain", "--conf-file", str(conf_file), "--dry-run"]) == 3  # no lake yet
    write_table("transactions", [transaction("COLOR", 1)])
    assert main(["maintain", "--conf-file", str(conf_file), "--tables", "nope"]) == 2
    assert "not a table the job writes: nope" in capsys.readouterr().err


class _Tables:
    """Stands in for ``pipeline.spark.land.maintenance``: files per table, what was done,
    and a compaction that meets a concurrent commit on ``conflicting``."""

    def __init__(self, conflicting: str, auto: str) -> None:
        self.files = {"transactions": 40, "records": 30, "gaps": 9}
        self.done: list[tuple[str, str]] = []
        self.conflicting, self.auto = conflicting, auto

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from pipeline.spark.land import maintenance

        name = lambda path: path.rsplit("/", 1)[-1]  # noqa: E731
        monkeypatch.setattr(maintenance, "is_table", lambda _s, p: name(p) in self.files)
        monkeypatch.setattr(maintenance, "table_files",
                            lambda _s, _c, p: (self.files[name(p)], self.files[name(p)] * 1000))
        monkeypatch.setattr(maintenance, "auto_compacted", lambda _s, p: name(p) == self.auto)
        monkeypatch.setattr(maintenance, "compact", lambda _s, p, _b: self._compact(name(p)))
        monkeypatch.setattr(maintenance, "vacuum",
                            lambda _s, p, h: self.done.append((name(p), f"vacuum {h}")))
        monkeypatch.setattr(maintenance, "checkpoint",
                            lambda _s, p: self.done.append((name(p), "checkpoint")))

    def _compact(self, table: str) -> None:
        if table == self.conflicting:
            raise RuntimeError("[DELTA_CONCURRENT_DELETE_READ] ConcurrentDeleteReadException: "
                               "this transaction attempted to read files deleted by a "
                               "concurrent update")
        self.done.append((table, "compact"))
        self.files[table] = 1


def test_a_conflict_skips_that_table_the_others_go_on(test_settings, monkeypatch) -> None:
    from pipeline.ops.maintain import run_plan

    fake = _Tables(conflicting="records", auto="gaps")
    fake.install(monkeypatch)
    lines: list[str] = []
    chosen = plan(test_settings, ["transactions", "records", "gaps", "alerts"])
    runs = run_plan(None, test_settings, chosen, lines.append)  # type: ignore[arg-type]
    assert fake.done == [("transactions", "compact"), ("transactions", "vacuum 168"),
                         ("transactions", "checkpoint"),
                         ("gaps", "vacuum 168"), ("gaps", "checkpoint")]
    assert [(r.table, r.files_after, r.failed) for r in runs] == [
        ("transactions", 1, False), ("records", None, True), ("gaps", 9, False),
        ("alerts", None, False)]
    assert runs[1].problem == "a concurrent commit won, next run"
    assert runs[3].problem == MISSING
    assert lines[0] == "[1/4] transactions: …" and len(lines) == 8
    assert lines[3] == ("[2/4] records: 30 files, 29.3 KB; "
                        "skipped: a concurrent commit won, next run")


def test_rounds_come_every_interval_and_spread_over_batches() -> None:
    from pipeline.spark.land.maintenance import Rounds

    rounds = Rounds(["a", "b", "c"], every_s=60, now=0)
    assert rounds.next_table(59) is None, "not at start"
    assert [rounds.next_table(60), rounds.next_table(61)] == ["a", "b"]
    assert rounds.finish(62) is None, "c is still to do"
    assert rounds.next_table(100) == "c" and rounds.next_table(100) is None
    assert rounds.finish(101) == 41 and rounds.finish(102) is None
    assert rounds.next_table(119) is None and rounds.next_table(120) == "a"


def test_in_job_maintenance_keeps_to_its_budget_and_never_raises(test_settings,
                                                                  monkeypatch) -> None:
    from types import SimpleNamespace

    from pipeline.spark.land.maintenance import InJobMaintenance

    fake = _Tables(conflicting="records", auto="gaps")
    fake.install(monkeypatch)
    now = [0.0]

    def clock() -> float:
        return now[0]

    def compact(table: str) -> None:
        now[0] += 4  # each compaction takes 4 s
        fake._compact(table)

    from pipeline.spark.land import maintenance
    monkeypatch.setattr(maintenance, "compact", lambda _s, p, _b: compact(p.rsplit("/")[-1]))
    settings = test_settings.model_copy(update={"maintenance": test_settings.maintenance
                                                .model_copy(update={"every_minutes": 1.0,
                                                                    "max_pause_seconds": 5.0})})
    step = InJobMaintenance(settings, ["transactions", "records", "gaps", "alerts"],
                            clock=clock, wall=lambda: 1_764_000_000.0)
    batch = SimpleNamespace(session=None)
    assert step.land(batch) == {"maint_compacted": 0, "maint_skipped": 0}  # not due yet
    now[0] = 60.0
    # budget 5 s: transactions (4 s) fits, records starts at 4 s, conflicts: the batch goes on
    assert step.land(batch) == {"maint_compacted": 1, "maint_skipped": 1,
                                "files:transactions": 1}
    # next batch: gaps is auto-compacted (left out), alerts does not exist: the round ends
    assert step.land(batch) == {"maint_compacted": 0, "maint_skipped": 0,
                                "maint_round_ms": 8000, "maint_last_round_at": 1_764_000_000}
    assert ("records", "compact") not in fake.done
