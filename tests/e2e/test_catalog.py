"""The catalog end to end, across processes, on the embedded setup's shared metastore (Derby's
network server, started by the product): the job (``jobs/stream.py``, its own process) lands
into the catalog and registers the tables of a layout added since the lake was made; ``urbpipe
catalog sync`` registers a lake made without the catalog; ``urbpipe catalog serve`` (a third
Spark application with the job's conf, started while the job runs) serves them over JDBC, and
beeline — the real JDBC client pyspark ships — lists the tables, reads every one by name, sees
every column's comment, and gets the same rows as Spark SQL reading the same tables.

Lean on purpose: one job run; ``catalog sync`` and ``catalog serve`` start together once the
job has named its tables (the first user of a new metastore creates its schema alone: several
at once spent a minute in Derby's lock timeouts); one beeline session asks everything. Every
table's comments and the views' filters are proven by tests/spark/typed/test_catalog_views.py; here
three tables are described, through another application. Every wait has a timeout that says
what it waited for."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from pipeline.config import Settings, load_settings
from pipeline.spark.engine import metastore
from pipeline.spark.land.dictionary import COLUMNS, column_doc
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.tables import TypedTableSet, job_tables
from tests.e2e.scenario import BOTH_FORMS, Scenario, landed
from tests.faults.helpers import Job, wait_for

ROOT = Path(__file__).resolve().parents[2]
BEELINE = ROOT / ".venv" / "bin" / "beeline"
TRANSACTIONS = 20


class Command:
    """A ``urbpipe`` command in its own process group, its output in a log file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.ops.cli", *args], cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def said(self, text: str) -> bool:
        return self.log.exists() and text in self.log.read_text(errors="replace")

    def finish(self, timeout_s: float = 180.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(self.proc.args[3:5])}: not done in "
                                 f"{timeout_s:.0f}s\n{self.tail()}") from None

    def wait_said(self, text: str, timeout_s: float) -> None:
        """Until the log says ``text``; fails at once if the command exited."""
        deadline = time.monotonic() + timeout_s
        while not self.said(text):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{' '.join(self.proc.args[3:5])} never said {text!r} "
                                     f"(exit {self.proc.poll()}):\n{self.tail()}")
            time.sleep(0.5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


def _conf(base: Path, out: Path, **catalog: object) -> Path:
    raw = yaml.safe_load(base.read_text())
    raw["catalog"] = {**raw["catalog"], "enabled": True, **catalog}
    out.write_text(yaml.safe_dump(raw))
    return out


def _beeline(settings: Settings, statements: list[tuple[str, str]]) -> dict[str, list[list[str]]]:
    """Run the statements in one beeline session; each one's rows (tab-separated cells) by
    its label."""
    script = "".join(f"SELECT '=== {label}';\n{sql};\n" for label, sql in statements)
    sql = settings.catalog.sql_server
    done = subprocess.run(
        [str(BEELINE), "-u", f"jdbc:hive2://{sql.host}:{sql.port}/default", "-n", "analyst",
         "--silent=true", "--showHeader=false", "--outputformat=tsv2", "-e", script],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out: dict[str, list[list[str]]] = {}
    label = None
    for line in done.stdout.splitlines():
        if line.startswith("=== "):
            label = line[4:]
            out[label] = []
        elif label is not None and line.strip():
            out[label].append(line.split("\t"))
    return out


def _whole(lake: Path) -> bool:
    """Every (subscription, dbid) with transactions has its watermark at its newest commit
    less 1 µs (no gap, nucleus lag 0): the batches' last commits are done (read without
    Spark)."""
    from deltalake import DeltaTable

    if not (lake / "watermarks" / "_delta_log" / f"{1:020d}.json").exists():
        return False
    newest: dict[tuple[str, int], datetime] = {}
    txs = DeltaTable(str(lake / "transactions")).to_pyarrow_table(
        columns=["subscription", "dbid", "commit_time", "initial_state"]).to_pylist()
    for t in txs:
        if not t["initial_state"]:
            key = (t["subscription"], t["dbid"])
            newest[key] = max(newest.get(key, t["commit_time"]), t["commit_time"])
    marks: dict[tuple[str, int], datetime] = {}
    for m in DeltaTable(str(lake / "watermarks")).to_pyarrow_table(
            columns=["subscription", "dbid", "watermark"]).to_pylist():
        if m["watermark"] is not None:
            key = (m["subscription"], m["dbid"])
            marks[key] = max(marks.get(key, m["watermark"]), m["watermark"])
    return bool(newest) and all(marks.get(k) == v - timedelta(microseconds=1)
                                for k, v in newest.items())


def _exists(settings: Settings, table: str) -> bool:
    return (Path(table_path(settings, table)) / "_delta_log").is_dir()


@pytest.fixture(scope="module")
def catalog_run(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("catalog")
    scenario = Scenario.build(tmp, "catalog", transactions=TRANSACTIONS, seed=31,
                              max_message_size=900, subscriptions=BOTH_FORMS, layouts=True,
                              stream={"watermark": {"nucleus_lag_ms": 0}})  # a plain nucleus
    home = {"local": {"port": 19527, "dir": str(tmp / "metastore"),
                      "jars_dir": str(ROOT / ".jars" / "catalog")},
            "sql_server": {"host": "127.0.0.1", "port": 19528}}
    job_conf = _conf(scenario.conf_path, tmp / "job.yaml", schema="urbpipe", **home)
    color_only = yaml.safe_load(job_conf.read_text())
    color_only["layouts"] = [lay for lay in color_only["layouts"] if lay["fnr"] == 4]
    (tmp / "color.yaml").write_text(yaml.safe_dump(color_only))
    sync_conf = _conf(tmp / "color.yaml", tmp / "sync.yaml", schema="urbpipe_sync", **home)
    settings = load_settings(job_conf, env={})
    # the lake, made without the catalog by a conf with COLOR's layout only
    made = load_settings(tmp / "color.yaml", env={})
    made = made.model_copy(update={"catalog": made.catalog.model_copy(
        update={"enabled": False})})
    ensure_tables(spark, made)
    TypedTableSet(made).ensure(spark)
    metastore.ensure(settings)
    job = Job(job_conf, tmp / "job.log")
    commands: list[Command] = []
    try:
        job.start()
        assert scenario.sim is not None
        scenario.sim.start()
        # the job's start makes the metastore's schema and names the tables (EMPLOYEE's too,
        # its layout added since the lake was made); then the sync and the endpoint at once
        wait_for(lambda: "v_current_employee_11: view" in job.log.read_text(errors="replace"),
                 240, "the job naming its tables in the catalog", job=job)
        sync = Command(tmp / "sync.log", "catalog", "sync", "--conf-file", str(sync_conf))
        serve = Command(tmp / "serve.log", "catalog", "serve", "--conf-file", str(job_conf))
        commands += [sync, serve]
        lake = Path(settings.location(settings.stream.lake_dir))
        wait_for(lambda: landed(lake) == len(scenario.truth()), 240, "every transaction",
                 job=job)
        wait_for(lambda: _whole(lake), 120,
                 "the batches' last commits (each watermark at its newest commit)", job=job)
        assert sync.finish() == 0, sync.tail()
        serve.wait_said("SQL endpoint ready", 180)
        yield settings, sync.log.read_text(), job
    finally:
        scenario.sim.stop() if scenario.sim else None
        for command in commands:
            command.stop()
        with contextlib.suppress(AssertionError):
            job.stop()
        job.cleanup()
        metastore.stop(settings)


def test_the_catalog_across_processes(spark, catalog_run) -> None:
    settings, synced, job = catalog_run
    tables = [t for t in job_tables(settings) if _exists(settings, t)]  # kafka_sent: if sent
    views = ["v_watermarks", "v_watermark_color", "v_watermark_employee", "v_watermark",
             "v_current_color_4", "v_current_employee_11"]
    assert "urbpipe_sync.current_color_4: registered" in synced, synced
    assert "urbpipe_sync.transactions: registered" in synced
    counts = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM urbpipe.{t}"
                                for t in [*tables, *views])
    described = ["transactions", "changes_color_4", "current_employee_11"]  # all: spark tests
    query = "SELECT isn, color, code FROM {} ORDER BY isn"
    got = _beeline(settings, [
        ("tables", "SHOW TABLES IN urbpipe"), ("synced", "SHOW TABLES IN urbpipe_sync"),
        *((f"describe {t}", f"DESCRIBE urbpipe.{t}") for t in described),
        ("counts", counts), ("current", query.format("urbpipe.current_color_4")),
        ("trusted", query.format("urbpipe.v_current_color_4")),
        ("watermark", "SELECT watermark FROM urbpipe.v_watermark_color")])
    assert job.alive, "the job ran all along"
    # listed: the job's tables, EMPLOYEE's (added to the conf after the lake was made), views
    assert {row[1] for row in got["tables"]} == {*tables, *views}
    assert {"current_employee_11", "changes_employee_11"} <= {row[1] for row in got["tables"]}
    assert {row[1] for row in got["synced"]} >= {"transactions", "current_color_4"}
    assert "current_employee_11" not in {row[1] for row in got["synced"]}
    # every column carries its comment, the job's own exactly the dictionary's (each table:
    # tests/spark/typed/test_catalog_views.py; here through the JDBC endpoint, in another
    # application)
    for table in described:
        shown = got[f"describe {table}"]
        columns = {r[0].strip(): r[2].strip() for r in shown if r[0] and len(r) > 2}
        assert columns and all(columns.values()), (table, shown)
        if table in COLUMNS:
            assert columns == {c: column_doc(table, c).comment() for c in columns}, table
    # every table and view read by name; the same rows as Spark SQL over the same tables
    by_spark = {t: spark.read.format("delta").load(table_path(settings, t)).count()
                for t in tables}
    read = {r[0]: int(r[1]) for r in got["counts"]}
    assert set(read) == {*tables, *views}
    assert {t: read[t] for t in tables} == by_spark
    assert by_spark["current_color_4"] > 0 and by_spark["current_employee_11"] > 0
    current = table_path(settings, "current_color_4")
    rows = spark.sql(query.format(f"delta.`{current}`"))
    expect = [[str(r.isn), r.color, str(r.code)] for r in rows.collect()]
    assert got["current"] == expect
    newest = spark.read.format("delta").load(table_path(settings, "transactions")).where(
        "subscription = 'COLOR' AND NOT initial_state").agg({"commit_time": "max"}).first()[0]
    watermark = newest - timedelta(microseconds=1)
    assert [_when(r[0]) for r in got["watermark"]] == [watermark], (
        "no gap, nucleus lag 0: the newest commit less 1 µs")
    status = spark.read.format("delta").load(table_path(settings, "file_status")).where(
        "dbid = 10006 AND fnr = 4").orderBy("version", "seq", ascending=False).limit(1).collect()
    trusted = spark.sql(
        f"SELECT isn, color, code FROM delta.`{current}` WHERE NOT deleted AND verified AND "
        f"commit_time <= TIMESTAMP '{watermark.isoformat(sep=' ')}' ORDER BY isn")
    trust = [] if status and status[0]["status"] != "active" else [
        [str(r.isn), r.color, str(r.code)] for r in trusted.collect()]
    assert trust, "the scenario has trustworthy rows"
    assert got["trusted"] == trust, "not deleted, verified, file active, at the watermark"


def _when(text: str) -> datetime:
    """A timestamp as JDBC prints it (java.sql.Timestamp: 1 to 9 fraction digits)."""
    day, _, fraction = text.partition(".")
    return datetime.fromisoformat(f"{day}.{(fraction or '0')[:6].ljust(6, '0')}")
