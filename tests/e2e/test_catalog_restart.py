"""The catalog across processes and a real restart (issue 38), while the replicator keeps
loading the topic:

1. the job (``jobs/stream.py``, its own process) lands with the catalog off and COLOR's layout
   only: a lake made without the catalog;
2. ``urbpipe catalog sync``, a process of its own with the catalog on, registers that lake in
   a new Hive metastore (embedded Derby, on a free port: test_cluster.py's run may use
   conf/test.yaml's at the same time);
3. the job restarts from its checkpoint with the catalog on and EMPLOYEE's layout added; it
   makes the new file's typed tables and names them, and lands the images that arrive after
   the restart into them; with ``reconcile.every_minutes`` it also runs full reconciliation
   rounds of COLOR/4 in its driver thread, which find no drift;
4. ``urbpipe catalog serve`` and beeline: every table of the lake is listed and read by name
   with the same rows the Delta log holds, the names sync made survived the restart, and the
   layout added at the restart is there with its columns' comments.

Every transaction the simulator generated lands once across the restart. (The job naming its
tables at its first start on a cluster, and the views' rows: tests/e2e/test_cluster.py and
tests/spark/typed/test_catalog_views.py.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import Settings, load_settings
from pipeline.ops.lake import Lake
from pipeline.spark.engine import metastore
from pipeline.spark.typed.tables import job_tables
from tests.e2e.catalog_clients import Command, beeline
from tests.faults.helpers import (
    COLOR_EBCDIC,
    EMPLOYEE_ASCII,
    Job,
    PacedLoad,
    assert_exactly_once,
    expected_transactions,
    fault_settings,
    landed_count,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(1800)]
START_S = 420.0  # JVM + Spark + first batch: minutes when the 2-core machine is shared
ADDED = "current_employee_11"  # the layout added at the restart: its current-state table
ADDED_TABLES = {"changes_employee_11", ADDED}
BEFORE = 10  # transactions landed by the job without the catalog before it stops


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _variant(conf: Path, out: Path, *, fnrs: list[int], catalog: dict[str, Any],
             reconcile: dict[str, Any] | None = None) -> tuple[Settings, Path]:
    """``conf`` (same topics, lake and checkpoint) with these files' layouts and catalog."""
    raw = yaml.safe_load(conf.read_text())
    raw["layouts"] = [lay for lay in raw["layouts"] if lay["fnr"] in fnrs]
    raw["catalog"] = catalog
    raw["reconcile"] = reconcile or {}
    out.write_text(yaml.safe_dump(raw))
    return load_settings(out, env={}), out


def _catalog(tmp: Path) -> dict[str, Any]:
    return {"enabled": True, "schema": "urbpipe",
            "local": {"port": _free_port(), "dir": str(tmp / "metastore"),
                      "jars_dir": str(ROOT / ".jars" / "catalog")},
            "sql_server": {"host": "127.0.0.1", "port": _free_port()}}


@dataclass
class Run:
    plain: Settings     # the first start's conf: no catalog, COLOR's layout
    named: Settings     # the restart's: the catalog on, EMPLOYEE's layout added
    load: PacedLoad
    sync_code: int | None
    synced: list[str]   # what sync printed
    lake_before: set[str]  # the job's tables the lake had when sync ran
    restart_log: str    # what the job said after its restart
    stop_code: int
    tables: list[str]   # the job's tables the lake has in the end
    got: dict[str, list[list[str]]]  # beeline's answers, by label


def _exists(settings: Settings) -> list[str]:
    lake = Lake(settings)
    return [t for t in job_tables(settings) if lake.exists(t)]


def _questions(tables: list[str]) -> list[tuple[str, str]]:
    counts = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM urbpipe.{t}" for t in tables)
    return [("tables", "SHOW TABLES IN urbpipe"), ("describe", f"DESCRIBE urbpipe.{ADDED}"),
            ("counts", counts),
            ("added", f"SELECT isn, personnel_id, name FROM urbpipe.{ADDED} ORDER BY isn")]


def _rows(settings: Settings, table: str) -> int:
    found = Lake(settings).table(table)
    return 0 if found is None else found.to_pyarrow_dataset().count_rows()


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("catalog-restart")
    # COLOR with its initial-state definition: the restart's in-job reconciliation asks it
    _, conf = fault_settings(tmp, "catalog", layouts=True, subscriptions=[
        {**COLOR_EBCDIC, "initial_state": "ICOLOR"}, EMPLOYEE_ASCII])
    plain, plain_conf = _variant(conf, tmp / "plain.yaml", fnrs=[4], catalog={"enabled": False})
    # the restart also runs in-job reconciliation rounds (jobs/stream.py's driver thread)
    named, named_conf = _variant(conf, tmp / "named.yaml", fnrs=[4, 11], catalog=_catalog(tmp),
                                 reconcile={"every_minutes": 0.1, "scheduled_round": "full"})
    load = PacedLoad(plain, seed=38, rate=2.0, max_message_size=900)
    job = Job(plain_conf, tmp / "job.log")
    serve: Command | None = None
    try:
        load.start()
        job.start()
        wait_for(lambda: landed_count(plain) >= BEFORE, START_S, "the first landings", job=job)
        assert job.stop() == 0, job.tail()
        lake_before = _exists(plain)
        sync = Command(tmp / "sync.log", "catalog", "sync", "--conf-file", str(named_conf))
        sync_code = sync.proc.wait(600)
        synced = sync.log.read_text(errors="replace").splitlines()

        job = Job(named_conf, tmp / "job.log")
        job.start()
        wait_for(lambda: _rows(named, ADDED) > 0, START_S,
                 "EMPLOYEE's images after the restart in its new typed table", job=job)
        load.finish()
        want = len(expected_transactions(load.sent))
        wait_for(lambda: landed_count(named) >= want, 300, "every transaction", job=job)
        wait_for(lambda: _rows(named, "reconciliation") > 0, 240,
                 "an in-job reconciliation round", job=job)
        restart_log = job.log.read_text(errors="replace").rpartition("===== start")[2]
        stop_code = job.stop()

        tables = _exists(named)
        serve = Command(tmp / "serve.log", "catalog", "serve", "--conf-file", str(named_conf))
        serve.wait_said("SQL endpoint ready", 300)
        got = beeline(named, _questions(tables))
        yield Run(plain, named, load, sync_code, synced, set(lake_before), restart_log,
                  stop_code, tables, got)
    finally:
        load.stop()
        job.cleanup()
        if serve is not None:
            serve.stop()
        metastore.stop(named)


def test_sync_registers_a_lake_made_without_the_catalog(run: Run) -> None:
    assert run.sync_code == 0, "\n".join(run.synced[-30:])
    assert not ADDED_TABLES & run.lake_before, "EMPLOYEE's layout came with the restart"
    assert {"transactions", "records", "current_color_4"} <= run.lake_before
    registered = {line.split(".", 1)[1].split(":")[0] for line in run.synced
                  if line.startswith("urbpipe.") and ": not in the lake" not in line}
    assert run.lake_before | {"v_current_color_4", "v_watermark"} <= registered, run.synced


def test_the_restart_names_the_layout_it_added_and_lands_into_it(run: Run) -> None:
    assert run.stop_code == 0
    said = {line.rpartition("catalog: ")[2] for line in run.restart_log.splitlines()
            if "catalog: " in line}
    # what sync named is kept (idempotent, and it survived the restart); the new file's named
    assert {f"{name}: kept" for name in run.lake_before} <= said, sorted(said)
    assert {*(f"{name}: registered" for name in ADDED_TABLES),
            "v_current_employee_11: view"} <= said, sorted(said)
    assert_exactly_once(run.named, run.load.sent)


def test_another_process_reads_every_table_by_name_after_the_restart(run: Run) -> None:
    got, tables = run.got, run.tables
    listed = {row[1] for row in got["tables"]}
    assert {*run.lake_before, *ADDED_TABLES, "v_current_color_4",
            "v_current_employee_11"} <= listed, "sync's names survived the restart"
    assert set(tables) <= listed
    read = {r[0]: int(r[1]) for r in got["counts"]}
    assert read == {t: _rows(run.named, t) for t in tables}
    assert read[ADDED] > 0 and len(got["added"]) == read[ADDED]
    lake = Lake(run.named).table(ADDED)
    assert lake is not None
    comments = {f.name: str(f.metadata.get("comment", "")) for f in lake.schema().fields}
    shown = {r[0].strip(): r[2].strip() for r in got["describe"] if r[0] and len(r) > 2}
    assert shown == comments and all(shown.values()), shown
    assert comments["personnel_id"].startswith("Adabas field AA:"), comments["personnel_id"]


def test_the_restarted_job_reconciles_on_its_own(run: Run) -> None:
    """``reconcile.every_minutes`` on the restart: the job process runs full rounds of COLOR/4
    in its driver thread (jobs/stream.py), while it lands the load, and finds no drift."""
    assert '"event": "reconcile_round"' in run.restart_log, run.restart_log[-3000:]
    found = Lake(run.named).table("reconciliation")
    assert found is not None, "no in-job round recorded its verdicts"
    rows = found.to_pyarrow_table(columns=["round", "fnr", "verdict"]).to_pylist()
    assert {r["fnr"] for r in rows} == {4}, "EMPLOYEE's subscription has no initial state"
    verdicts = {r["verdict"] for r in rows}
    assert verdicts <= {"match", "unanswered"} and "match" in verdicts, verdicts
