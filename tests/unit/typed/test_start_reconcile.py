"""Where the start-time reconcile runs (no Spark: the Spark calls are replaced): right after
the job's own tables exist and before anything else of the query, and a conf layout its tables
cannot take ends ``jobs/stream.py`` with exit code 2 and the one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline.spark.engine import query
from pipeline.typed.widening import LayoutConflict

ROOT = Path(__file__).resolve().parents[3]


class _Stop(Exception):
    pass


def test_start_stream_reconciles_right_after_ensure_tables(monkeypatch, test_settings) -> None:
    calls: list[str] = []
    monkeypatch.setattr(query, "ensure_tables", lambda spark, s: calls.append("ensure_tables"))
    monkeypatch.setattr(query, "reconcile_tables",
                        lambda spark, s: calls.append("reconcile_tables"))

    def checkpoint(spark, path):
        calls.append("checkpoint_app_id")
        raise _Stop

    monkeypatch.setattr(query, "checkpoint_app_id", checkpoint)
    with pytest.raises(_Stop):
        query.start_stream(object(), test_settings)  # type: ignore[arg-type]
    assert calls == ["ensure_tables", "reconcile_tables", "checkpoint_app_id"]


def test_a_layout_conflict_at_start_exits_with_code_2(monkeypatch, capsys) -> None:
    from pipeline.ops import topic_check
    from pipeline.spark.engine import session

    line = "layouts COLOR/10006/4: the format buffer now reads AB as string, but ..."

    def refuse(spark, settings, **_kw):
        raise LayoutConflict(line)

    monkeypatch.setattr(topic_check, "check_start", lambda settings: None)  # no broker
    monkeypatch.setattr(session, "build_session", lambda settings: object())
    monkeypatch.setattr(query, "start_stream", refuse)
    spec = importlib.util.spec_from_file_location("stream_job", ROOT / "jobs" / "stream.py")
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    assert job.main(["--conf-file", str(ROOT / "conf" / "test.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {line}"
