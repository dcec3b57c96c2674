"""The README's cluster recipe is the one the e2e test runs (tests/e2e/test_cluster.py runs
``cluster.RECIPE``, so a README that drifted from it would document an untested command), and
the cluster tool's process handling without Spark."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from devtools import cluster

ROOT = Path(__file__).resolve().parents[3]


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def test_readme_has_the_recipe_verbatim_in_a_bash_block_of_its_cluster_section() -> None:
    section = _section((ROOT / "README.md").read_text(), "Running on a real cluster")
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert any(cluster.RECIPE in block for block in blocks), (
        "README 'Running on a real cluster' must show devtools.cluster.RECIPE verbatim")


def test_the_recipe_names_what_exists_and_ships_package_and_jars() -> None:
    assert (ROOT / "jobs" / "stream.py").exists() and (ROOT / "pipeline").is_dir()
    for option in ("--master \"$MASTER\"", "--py-files dist/pipeline.zip", "--jars ",
                   "jobs/stream.py --conf-file \"$CONF\""):
        assert option in cluster.RECIPE, option
    done = subprocess.run([sys.executable, "-m", "devtools.cluster", "recipe"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout == cluster.RECIPE


def test_free_ports_are_distinct_and_stop_without_a_cluster_says_so(tmp_path: Path) -> None:
    ports = cluster.free_ports(3)
    assert len(set(ports)) == 3
    assert cluster.stop(tmp_path) == "cluster not running"
    assert cluster.status(tmp_path) is None


def test_stop_job_ends_the_whole_process_group_of_a_job_not_yet_running_spark() -> None:
    job = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60; wait"],
                           start_new_session=True)
    try:
        assert cluster.driver_pid(job) is None
        assert cluster.stop_job(job, timeout_s=10) is not None
        assert cluster.group_processes(job.pid) == []
    finally:
        if job.poll() is None:
            job.kill()


def test_demo_waits_for_quiet_landing_and_notices_a_job_that_exited() -> None:
    counts = iter([0, 3, 5, 5, 5, 5])
    alive = subprocess.Popen(["sleep", "30"])
    try:
        why = cluster._wait_quiet(lambda: True, lambda: next(counts, 5), alive, quiet_s=0.0,
                                  timeout_s=60, poll_s=0.0)
        assert why == "5 transactions landed, nothing new for 0s"
    finally:
        alive.kill()
        alive.wait()
    dead = subprocess.Popen(["true"])
    dead.wait()
    why = cluster._wait_quiet(lambda: True, lambda: 0, dead, quiet_s=0.0, timeout_s=60,
                              poll_s=0.0)
    assert why == "the job exited with code 0"
