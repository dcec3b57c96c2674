"""The deployment path on a real Spark standalone cluster: a master and one worker from
pyspark's own spark-class on 127.0.0.1 (devtools/cluster.py), the job spark-submit'ed
exactly as README "Running on a real cluster" says (``cluster.RECIPE``), against the simulator
on the test broker, with the catalog on as conf/cluster.example.yaml has it.

What it proves: spark-submit's ``--master`` and ``--driver-memory`` win over conf/test.yaml's
``local[2]`` and 2g (a bug this test caught: conf won, and the job ran on the driver alone); the
application got the worker's core and its tasks ran in an executor JVM the worker started,
which fetched ``--py-files`` and ``--jars``; every transaction lands once, as the simulator
sent it; SIGTERM to the driver stops it with exit code 0, and nothing is left running.

And the catalog across processes (issue 38), on the same run: the job (given Derby's client by
the recipe's ``--driver-class-path``) starts the embedded metastore and names every table it
made at its start (the raw ones, COLOR layout's typed ones) and the views, and kafka_sent at
its first send; ``urbpipe catalog serve``, another Spark application with the job's conf
started while the job lands, serves them over JDBC, and beeline lists the tables and views,
reads every table by name, sees the columns' comments and gets the same rows as Spark SQL.
Every table's comments are read from its Delta log. (``urbpipe catalog sync`` and a layout
added at a restart, each in its own process: tests/e2e/test_catalog_restart.py; the views'
filters on a scenario made for them: tests/spark/typed/test_catalog_views.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster import (
    Cluster,
    executor_logs,
    group_processes,
    master_state,
    start,
    stop,
    stop_job,
    submit,
)
from pipeline.config import Settings
from pipeline.ops.lake import Lake
from pipeline.spark.engine import metastore
from pipeline.spark.land.dictionary import COLUMNS, column_doc
from pipeline.spark.land.tables import table_path
from pipeline.spark.typed.tables import job_tables
from tests.e2e.catalog_clients import Command, beeline, jdbc_time, watermarks_whole
from tests.e2e.scenario import BOTH_FORMS, Scenario, landed, wait_until

ROOT = Path(__file__).resolve().parents[2]
#: COLOR's layout only: its typed tables and view cost the one-core cluster's run less than
#: both files' (EMPLOYEE's typed comments and views: tests/spark/typed/test_catalog_views.py)
LAYOUTS = [4]
VIEWS = ["v_watermarks", "v_watermark_color", "v_watermark_employee", "v_watermark",
         "v_current_color_4"]
#: read through JDBC (every view's rows, on a scenario made for them:
#: tests/spark/typed/test_catalog_views.py); each reads ``v_watermarks``
READ_VIEWS = ["v_watermark_color", "v_current_color_4"]
#: DESCRIBE'd through JDBC (every table's comments are read from the Delta log below)
DESCRIBED = ["transactions", "changes_color_4", "current_color_4"]
CURRENT = "SELECT isn, color, code FROM {} ORDER BY isn"


@dataclass
class Run:
    """What the run left for the tests to check."""

    scenario: Scenario
    cluster: Cluster
    log: Path
    job_pid: int
    code: int | None        # the job's exit code after SIGTERM
    app: dict[str, Any]     # the master's view of the job's application, while it ran
    worker: dict[str, Any]
    tables: list[str]       # the job's tables the lake has
    got: dict[str, list[list[str]]]  # beeline's answers, by label


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1g), stopped by PID whatever the test did."""
    home = tmp_path_factory.mktemp("cluster") / "cluster"
    started = start(home)
    try:
        yield started
    finally:
        stop(home)
    leftovers = group_processes(started.master_pid) + group_processes(started.worker_pid)
    assert not leftovers, f"cluster processes left running: {leftovers}"


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def _running_app(cluster: Cluster, name: str) -> dict[str, Any]:
    """The one application the master runs, as its /json/ shows it."""
    state = master_state(cluster.master_ui)
    apps = state.get("activeapps", [])
    assert [a["name"] for a in apps] == [name], apps
    return apps[0]


def _catalog(tmp: Path, schema: str) -> dict[str, Any]:
    """The catalog section: on, its Derby database in ``tmp`` (conf/test.yaml's ports)."""
    return {"enabled": True, "schema": schema,
            "local": {"port": 19527, "dir": str(tmp / "metastore"),
                      "jars_dir": str(ROOT / ".jars" / "catalog")}}


def _questions(tables: list[str]) -> list[tuple[str, str]]:
    """What beeline asks, in one session: names, comments, every table read."""
    counts = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM urbpipe.{t}"
                                for t in [*tables, *READ_VIEWS])
    return [("tables", "SHOW TABLES IN urbpipe"),
            *((f"describe {t}", f"DESCRIBE urbpipe.{t}") for t in DESCRIBED),
            ("counts", counts), ("current", CURRENT.format("urbpipe.current_color_4")),
            ("trusted", CURRENT.format("urbpipe.v_current_color_4")),
            ("watermark", "SELECT watermark FROM urbpipe.v_watermark_color")]


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, cluster: Cluster,
        tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The README recipe on ``cluster`` until every transaction landed, the SQL endpoint
    started once the job named its tables (the first user of a new metastore makes its schema
    alone: several at once spent a minute in Derby's lock timeouts); SIGTERM to the driver,
    then beeline's questions. Everything it started is stopped before the tests look."""
    tmp = tmp_path_factory.mktemp("cluster-run")
    scenario = Scenario.build(tmp, "cluster", transactions=40, seed=31, max_message_size=900,
                              subscriptions=BOTH_FORMS, layouts=LAYOUTS,
                              stream={"watermark": {"nucleus_lag_ms": 0}},  # a plain nucleus
                              catalog=_catalog(tmp, "urbpipe"))
    settings = scenario.settings
    assert settings.spark.master.startswith("local")  # the conf says local; submit says not
    lake, log = Path(settings.stream.lake_dir), tmp / "job.log"
    expected = len(scenario.truth())
    assert scenario.sim is not None
    commands: list[Command] = []
    job = None
    try:
        scenario.sim.start()
        job = submit(ROOT, cluster.master_url, scenario.conf_path, log)

        def running(predicate: Callable[[], bool]) -> Callable[[], bool]:
            def check() -> bool:
                assert job.poll() is None, f"the job exited ({job.returncode}):\n{_tail(log)}"
                return predicate()
            return check

        wait_until(running(lambda: "catalog: v_current_color_4: view" in log.read_text(
            errors="replace")), 300, "the job naming its tables in the catalog", log)
        # another application with the job's conf: started while the job lands
        serve = Command(tmp / "serve.log", "catalog", "serve", "--conf-file",
                        str(scenario.conf_path))
        commands.append(serve)
        wait_until(running(lambda: landed(lake) >= expected), 300, "all transactions landed",
                   log)
        wait_until(running(lambda: watermarks_whole(lake)), 120,
                   "the batches' last commits (each watermark at its newest commit)", log)
        app = _running_app(cluster, settings.spark.app_name)
        worker = master_state(cluster.master_ui)["workers"][0]
        code = stop_job(job)
        serve.wait_said("SQL endpoint ready", 180)
        tables = [t for t in job_tables(settings) if Lake(settings).exists(t)]
        got = beeline(settings, _questions(tables))
    finally:
        scenario.sim.stop()
        for command in commands:
            command.stop()
        if job is not None:
            stop_job(job, timeout_s=60)
        metastore.stop(settings)
    return Run(scenario, cluster, log, job.pid, code, app, worker, tables, got)


def test_readme_recipe_runs_the_job_on_the_cluster_and_lands_every_transaction(
        run: Run) -> None:
    scenario, cluster, log = run.scenario, run.cluster, run.log
    settings = scenario.settings
    assert scenario.sim is not None and scenario.sim.error is None, scenario.sim.error
    assert run.code == 0, _tail(log)
    assert not group_processes(run.job_pid), "the job left processes running"

    # spark-submit's settings won over conf: the session ran on the cluster, with 1g
    text = log.read_text(errors="replace")
    assert f"master {cluster.master_url} (spark-submit)" in text, _tail(log)
    assert "driver memory 1g (spark-submit)" in text, _tail(log)
    assert f"Spark session {run.app['id']}:" in text

    # the worker's core went to the app, and its executor JVM ran the tasks
    assert run.app["cores"] == 1 and run.worker["coresused"] == 1, (run.app, run.worker)
    stderrs = executor_logs(cluster, run.app["id"])
    assert stderrs, f"no executor ran under {cluster.work_dir}/{run.app['id']}"
    executor = "\n".join(p.read_text(errors="replace") for p in stderrs)
    assert "Running task" in executor and "Finished task" in executor
    shipped = {p.name for p in stderrs[0].parent.iterdir()}
    assert "pipeline.zip" in shipped, shipped                       # --py-files
    assert any(n.startswith("spark-sql-kafka") for n in shipped), shipped   # --jars

    # what landed is what the simulator sent, once
    tables = Lake(settings)
    txs = tables.read("transactions", ["subscription", "destination", "tsnr", "record_count"])
    assert sorted(tuple(r.values()) for r in txs.to_pylist()) == sorted(scenario.truth())
    records = tables.read("records", ["subscription", "tsnr", "rsnr", "fnr", "isn", "type"])
    assert sorted(tuple(r.values()) for r in records.to_pylist()) == sorted(
        (s.subscription, s.tsnr, *rec) for s in scenario.sent for rec in s.records())
    images = tables.read("images", ["subscription", "tsnr", "rsnr", "dsnr", "image_type",
                                    "payload"])
    assert sorted(tuple(r.values()) for r in images.to_pylist()) == sorted(
        (s.subscription, s.tsnr, *img) for s in scenario.sent for img in s.images())
    for empty in ("gaps", "quarantine", "duplicates"):
        assert tables.read(empty).num_rows == 0, empty


def test_the_catalog_names_every_table_for_another_application_and_beeline(
        spark: Any, run: Run) -> None:
    settings, got, tables = run.scenario.settings, run.got, run.tables
    lake = Lake(settings)
    # listed: the job's tables, each layout's (made at the start, before the names), views
    assert {row[1] for row in got["tables"]} == {*tables, *VIEWS}
    assert {"current_color_4", "changes_color_4", "kafka_sent"} <= set(tables), (
        "COLOR's typed tables, and kafka_sent made by the job's first send")
    # DESCRIBE through the endpoint shows the comments the Delta log holds
    for table in DESCRIBED:
        shown = got[f"describe {table}"]
        columns = {r[0].strip(): r[2].strip() for r in shown if r[0] and len(r) > 2}
        assert columns and all(columns.values()), (table, shown)
        assert columns == _comments(settings, table), table
    # every table read by name, each table's rows all there
    read = {r[0]: int(r[1]) for r in got["counts"]}
    assert set(read) == {*tables, *READ_VIEWS}
    assert {t: read[t] for t in tables} == {t: _found(lake, t).to_pyarrow_dataset().count_rows()
                                            for t in tables}
    assert read["current_color_4"] > 0 and read["transactions"] > 0
    # the same rows as Spark SQL over the same table, and the trustworthy ones
    current = table_path(settings, "current_color_4")
    rows = spark.sql(CURRENT.format(f"delta.`{current}`")).collect()
    assert got["current"] == [[str(r.isn), r.color, str(r.code)] for r in rows]
    # the watermark: no gap and nucleus lag 0, so COLOR's newest commit less 1 µs
    commits = [r["commit_time"] for r in lake.read("transactions").to_pylist()
               if r["subscription"] == "COLOR" and not r["initial_state"]]
    watermark = max(commits).astimezone(UTC).replace(tzinfo=None) - timedelta(microseconds=1)
    assert [jdbc_time(r[0]) for r in got["watermark"]] == [watermark]
    status = sorted((r["version"], r["seq"], r["status"]) for r in lake.read(
        "file_status").to_pylist() if (r["dbid"], r["fnr"]) == (10006, 4))
    trusted = spark.sql(
        f"SELECT isn, color, code FROM delta.`{current}` WHERE NOT deleted AND verified AND "
        f"commit_time <= TIMESTAMP '{watermark.isoformat(sep=' ')}' ORDER BY isn")
    trust = [] if status and status[-1][2] != "active" else [
        [str(r.isn), r.color, str(r.code)] for r in trusted.collect()]
    assert trust, "the scenario has trustworthy rows"
    assert got["trusted"] == trust, "not deleted, verified, file active, at the watermark"


def _found(lake: Lake, table: str) -> Any:
    found = lake.table(table)
    assert found is not None, table
    return found


def _comments(settings: Settings, table: str) -> dict[str, str]:
    """Column → comment as the table's Delta log holds them (read without Spark)."""
    return {f.name: str(f.metadata.get("comment", ""))
            for f in _found(Lake(settings), table).schema().fields}


def test_every_column_of_every_table_carries_its_comment(run: Run) -> None:
    """In the Delta log of every table the job wrote (raw ones by Spark and the driver's
    direct commits, typed ones by delta-rs in the tasks): the raw tables' exactly the data
    dictionary's, the typed value columns naming their Adabas field."""
    settings = run.scenario.settings
    for table in run.tables:
        notes = _comments(settings, table)
        assert notes and all(notes.values()), (table, [c for c, t in notes.items() if not t])
        if table in COLUMNS:
            assert notes == {c: column_doc(table, c).comment() for c in notes}, table
    code = _comments(settings, "current_color_4")["code"]
    assert code.startswith("Adabas field AB: format U, length 16, scale 0."), code
