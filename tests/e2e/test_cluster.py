"""The deployment path on a real Spark standalone cluster: a master and one worker from
pyspark's own spark-class on 127.0.0.1 (devtools/cluster.py), the job spark-submit'ed
exactly as README "Running on a real cluster" says (``cluster.RECIPE``), against the simulator
on the test broker.

What it proves: spark-submit's ``--master`` and ``--driver-memory`` win over conf/test.yaml's
``local[2]`` and 2g (a bug this test caught: conf won, and the job ran on the driver alone); the
application got the worker's core and its tasks ran in an executor JVM the worker started,
which fetched ``--py-files`` and ``--jars``; every transaction lands once, as the simulator
sent it; SIGTERM to the driver stops it with exit code 0, and nothing is left running.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
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
from pipeline.ops.lake import Lake
from tests.e2e.scenario import BOTH_FORMS, Scenario, landed, wait_until

ROOT = Path(__file__).resolve().parents[2]

Submit = Callable[[Path, Path], subprocess.Popen]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1g), stopped by PID whatever the test did."""
    home = tmp_path / "cluster"
    started = start(home)
    try:
        yield started
    finally:
        stop(home)
    leftovers = group_processes(started.master_pid) + group_processes(started.worker_pid)
    assert not leftovers, f"cluster processes left running: {leftovers}"


@pytest.fixture
def recipe(cluster: Cluster) -> Iterator[Submit]:
    """Runs the README recipe against ``cluster``; every job it started is stopped (SIGTERM
    to the driver, SIGKILL to its process group if that fails) before the cluster is."""
    jobs: list[subprocess.Popen] = []

    def run(conf: Path, log: Path) -> subprocess.Popen:
        jobs.append(submit(ROOT, cluster.master_url, conf, log))
        return jobs[-1]

    yield run
    for job in jobs:
        stop_job(job, timeout_s=60)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def _running_app(cluster: Cluster, name: str) -> dict[str, Any]:
    """The one application the master runs, as its /json/ shows it."""
    state = master_state(cluster.master_ui)
    apps = state.get("activeapps", [])
    assert [a["name"] for a in apps] == [name], apps
    return apps[0]


def test_readme_recipe_runs_the_job_on_the_cluster_and_lands_every_transaction(
        kafka_bootstrap: str, cluster: Cluster, recipe: Submit, tmp_path: Path) -> None:
    scenario = Scenario.build(tmp_path, "cluster", transactions=40, seed=31,
                              max_message_size=900, subscriptions=BOTH_FORMS)
    settings = scenario.settings
    assert settings.spark.master.startswith("local")  # the conf says local; submit says not
    lake, log = Path(settings.stream.lake_dir), tmp_path / "job.log"
    expected = len(scenario.truth())
    assert scenario.sim is not None
    scenario.sim.start()
    try:
        job = recipe(scenario.conf_path, log)

        def all_landed() -> bool:
            assert job.poll() is None, f"the job exited ({job.returncode}):\n{_tail(log)}"
            return landed(lake) >= expected

        wait_until(all_landed, 300, "all transactions landed", log)
        app = _running_app(cluster, settings.spark.app_name)
        worker = master_state(cluster.master_ui)["workers"][0]
        code = stop_job(job)
    finally:
        scenario.sim.stop()
    assert scenario.sim.error is None, scenario.sim.error
    assert code == 0, _tail(log)
    assert not group_processes(job.pid), "the job left processes running"

    # spark-submit's settings won over conf: the session ran on the cluster, with 1g
    text = log.read_text(errors="replace")
    assert f"master {cluster.master_url} (spark-submit)" in text, _tail(log)
    assert "driver memory 1g (spark-submit)" in text, _tail(log)
    assert f"Spark session {app['id']}:" in text

    # the worker's core went to the app, and its executor JVM ran the tasks
    assert app["cores"] == 1 and worker["coresused"] == 1, (app, worker)
    stderrs = executor_logs(cluster, app["id"])
    assert stderrs, f"no executor ran under {cluster.work_dir}/{app['id']}"
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
