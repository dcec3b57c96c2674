"""A Spark standalone cluster on this machine (one master, one worker) from pyspark's own
``spark-class``, and the spark-submit recipe of README "Running on a real cluster".

The job's deployment path — spark-submit, the driver apart from executor JVMs with their own
Python workers, ``--jars`` and ``--py-files`` shipped to them — is the same on this cluster as
on a real one; ``make cluster-demo`` and tests/e2e/test_cluster.py run it here. Both daemons
listen on 127.0.0.1 on free ports, run in their own sessions and are stopped by PID (the
worker's session holds its executors and their Python workers too).

    python -m devtools.cluster start|stop|status [--dir .run/cluster]
    python -m devtools.cluster recipe        # the README recipe, as run here
    python -m devtools.cluster demo [--conf-file conf/local.yaml]   # make cluster-demo
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ".run/cluster"
START_TIMEOUT_S = 90.0

#: README "Running on a real cluster", run as written by ``submit`` (``$MASTER``, ``$CONF``
#: set, in the project folder); tests/unit/devtools/test_cluster_recipe.py keeps README and
#: this equal.
RECIPE = """\
export PATH="$PWD/.venv/bin:$PATH"   # spark-submit finds pyspark (its SPARK_HOME) this way
mkdir -p dist && python -m zipfile -c dist/pipeline.zip pipeline
spark-submit --master "$MASTER" --deploy-mode client --driver-memory 1g \\
  --conf spark.executor.memory=1g --conf spark.executor.cores=1 \\
  --conf spark.pyspark.python="$PWD/.venv/bin/python" \\
  --jars "$(python -m pipeline.spark.engine.jars --conf-file "$CONF")" \\
  --driver-class-path "$(python -m pipeline.spark.engine.jars --conf-file "$CONF" \\
                         --driver-class-path)" \\
  --py-files dist/pipeline.zip \\
  jobs/stream.py --conf-file "$CONF"
"""

#: The line of the job's log (pipeline/spark/engine/session.py) that says where its session runs.
SESSION_LINE = "Spark session "


class ClusterError(RuntimeError):
    """A one-line reason the cluster could not be started."""


@dataclass(frozen=True)
class Cluster:
    """Where a started cluster listens and keeps its files."""

    master_url: str
    master_ui: str
    worker_ui: str
    work_dir: str  # the worker's: <app id>/<executor id>/stderr of every executor
    master_pid: int
    worker_pid: int


def spark_home() -> Path:
    """pyspark's own folder: it has bin/spark-class and the jars, no separate Spark needed."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1 (held together while chosen, so two calls
    never hand out the same port; another process may still take one before the daemon)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                 for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _daemon(home: Path, name: str, args: list[str]) -> int:
    """Start one daemon with spark-class in its own session; its PID (spark-class execs java,
    so the PID is the JVM's and its process group holds everything it starts)."""
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_MEMORY": "256m"}
    with (home / f"{name}.log").open("ab") as out:
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    (home / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def master_state(master_ui: str) -> dict[str, Any]:
    """The master's JSON status (workers, active and completed applications)."""
    with urllib.request.urlopen(f"{master_ui}/json/", timeout=5) as reply:
        return json.load(reply)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is no zombie (a zombie answers kill 0 too)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, …"""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()


def _wait_for_worker(cluster: Cluster, home: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with contextlib.suppress(OSError, ValueError):
            workers = master_state(cluster.master_ui).get("workers", [])
            if any(w.get("state") == "ALIVE" for w in workers):
                return
        for name, pid in (("master", cluster.master_pid), ("worker", cluster.worker_pid)):
            if not _alive(pid):
                raise ClusterError(f"the {name} exited during start; see {home / name}.log")
        if time.monotonic() > deadline:
            raise ClusterError(f"no worker registered in {START_TIMEOUT_S:.0f}s; see {home}")
        time.sleep(0.5)


def start(home: Path, *, worker_cores: int = 1, worker_memory: str = "1g") -> Cluster:
    """Start a master and one worker on free ports; stop them again if the start fails."""
    if (home / "cluster.json").exists() and status(home) is not None:
        raise ClusterError(f"a cluster is already running from {home}: stop it first")
    home.mkdir(parents=True, exist_ok=True)
    port, master_ui_port, worker_ui_port = free_ports(3)
    work = home / "work"
    work.mkdir(exist_ok=True)
    master_pid = _daemon(home, "master", [
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
        "--webui-port", str(master_ui_port)])
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui_port}",
                      f"http://127.0.0.1:{worker_ui_port}", str(work.resolve()), master_pid, 0)
    try:
        worker_pid = _daemon(home, "worker", [
            "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
            "--webui-port", str(worker_ui_port), "--cores", str(worker_cores),
            "--memory", worker_memory, "--work-dir", cluster.work_dir])
        cluster = Cluster(**{**asdict(cluster), "worker_pid": worker_pid})
        (home / "cluster.json").write_text(json.dumps(asdict(cluster), indent=2))
        _wait_for_worker(cluster, home)
    except BaseException:
        stop(home)
        raise
    return cluster


def status(home: Path) -> Cluster | None:
    """The cluster started from ``home`` if both daemons still run."""
    try:
        cluster = Cluster(**json.loads((home / "cluster.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return cluster if _alive(cluster.master_pid) and _alive(cluster.worker_pid) else None


def stop(home: Path, timeout_s: float = 30.0) -> str:
    """Stop the worker (its executors with it), then the master, by the PIDs they wrote:
    SIGTERM to each daemon's session, SIGKILL after ``timeout_s``."""
    stopped = []
    for name in ("worker", "master"):
        pid_file = home / f"{name}.pid"
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        _end_group(pid, timeout_s)
        pid_file.unlink(missing_ok=True)
        stopped.append(f"{name} (pid {pid})")
    (home / "cluster.json").unlink(missing_ok=True)
    return f"stopped {', '.join(stopped)}" if stopped else "cluster not running"


def _end_group(pid: int, timeout_s: float) -> None:
    """SIGTERM the process group ``pid`` leads, then SIGKILL what is left of it (an executor
    or Python worker that outlived its daemon)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when this process started it
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def group_processes(pgid: int) -> list[int]:
    """The living processes of process group ``pgid`` (what a stop must leave none of)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = _stat(int(entry.name))
                if int(fields[2]) == pgid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def executor_logs(cluster: Cluster, app_id: str) -> list[Path]:
    """The stderr of every executor the worker ran for ``app_id``."""
    return sorted((Path(cluster.work_dir) / app_id).glob("*/stderr"))


def submit(root: Path, master_url: str, conf_file: Path, log: Path) -> subprocess.Popen:
    """Run :data:`RECIPE` with bash in ``root`` in a session of its own (stop it with
    :func:`stop_job`), output appended to ``log``. The driver binds 127.0.0.1 like the
    daemons (``SPARK_LOCAL_IP``, not part of the recipe: a real driver host needs no such)."""
    env = {**os.environ, "MASTER": master_url, "CONF": str(conf_file),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("ab") as out:
        return subprocess.Popen(["bash", "-euo", "pipefail", "-c", RECIPE], cwd=root, env=env,
                                stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def driver_pid(job: subprocess.Popen) -> int | None:
    """The Python driver (jobs/stream.py) spark-submit's JVM runs for ``job``, if it runs.

    It is the one to signal: SIGTERM to spark-submit's JVM ends the driver's py4j gateway
    under it (the query then fails, exit 1) instead of stopping at a batch boundary.
    """
    for pid in group_processes(job.pid):
        with contextlib.suppress(OSError, IndexError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = Path(f"/proc/{_stat(pid)[1]}/cmdline").read_bytes()
            if (Path(argv[0].decode()).name.startswith("python")
                    and b"org.apache.spark.deploy.SparkSubmit" in parent):
                return pid
    return None


def stop_job(job: subprocess.Popen, timeout_s: float = 120.0) -> int | None:
    """Stop a submitted job as an operator does: SIGTERM to its Python driver (it stops the
    query at a batch boundary and exits 0, and spark-submit with it), SIGKILL to the job's
    whole process group after ``timeout_s``. The exit code (None when it had to be killed)."""
    if job.poll() is None:
        pid = driver_pid(job)
        with contextlib.suppress(ProcessLookupError):
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
            else:  # not started yet (or already gone): nothing to stop gracefully
                os.killpg(job.pid, signal.SIGTERM)
    try:
        code: int | None = job.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)  # whatever outlived it
    job.wait(30)
    _wait_group_gone(job.pid, 10.0)
    return code


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Until no process of group ``pgid`` is alive (or ``timeout_s``): a SIGKILL is
    delivered asynchronously, and a child orphaned by the job's bash (reparented, not ours
    to wait for) can still be running for a moment after ``killpg`` returns — on a busy
    machine long enough for a check right after the stop to find it."""
    deadline = time.monotonic() + timeout_s
    while group_processes(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- make cluster-demo ----------------------------------------------------------------------

def _table_rows(settings: Any) -> dict[str, int]:
    """Rows per table of the lake, read without Spark (the job holds the cluster's core)."""
    from pipeline.ops.lake import Lake
    from pipeline.spark.land.tables import TABLES

    lake = Lake(settings)
    return {name: lake.read(name).num_rows for name in TABLES if lake.exists(name)}


def _wait_quiet(done: Callable[[], bool], rows: Callable[[], int], job: subprocess.Popen,
                quiet_s: float, timeout_s: float, poll_s: float = 2.0) -> str:
    """Wait until ``done()`` and ``rows()`` stayed unchanged for ``quiet_s`` (the job, in
    another process, has no query to ask whether it is idle); why the wait ended."""
    deadline, last, since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        if job.poll() is not None:
            return f"the job exited with code {job.returncode}"
        now = rows()
        if now != last:
            last, since = now, time.monotonic()
        elif done() and now > 0 and time.monotonic() - since >= quiet_s:
            return f"{now} transactions landed, nothing new for {quiet_s:.0f}s"
        time.sleep(poll_s)
    return f"timeout after {timeout_s:.0f}s"


def demo(home: Path, conf_file: Path, *, transactions: int, seed: int,
         timeout_s: float) -> int:
    """The README recipe on a cluster here, fed by the simulator: what ``make cluster-demo``
    runs. Resets the conf's topics, lake and checkpoint like ``make demo``; stops the job and
    the cluster at the end, whatever happened."""
    from devtools.demo import FAULTS, SIM, reset
    from devtools.sim import FaultPlan
    from devtools.sim.live import LiveReplicator
    from pipeline.config import load_settings
    from pipeline.ops.lake import Lake

    settings = load_settings(conf_file)
    print("cluster-demo: resetting the conf's topics, lake and checkpoint", flush=True)
    reset(settings)
    cluster = start(home)
    log = (home / "job.log").resolve()
    log.unlink(missing_ok=True)
    lake = Lake(settings)
    apps: list[dict[str, Any]] = []
    code: int | None = None
    job: subprocess.Popen | None = None
    sim: LiveReplicator | None = None
    try:  # from here on, whatever happens, the job and the cluster are stopped
        print(f"cluster: master {cluster.master_url} (UI {cluster.master_ui}), one worker "
              f"(UI {cluster.worker_ui}, executor logs under {cluster.work_dir}/<app id>/)\n"
              f"running the README recipe (python -m devtools.cluster recipe); job log "
              f"{log}", flush=True)
        job = submit(ROOT, cluster.master_url, conf_file.resolve(), log)
        sim = LiveReplicator(settings, transactions=transactions, seed=seed,
                             faults=FaultPlan(counts=FAULTS), rate=200.0, verbose=True,
                             sim=SIM).start()
        why = _wait_quiet(sim.streamed.is_set,
                          lambda: lake.read("transactions", ["tsnr"]).num_rows
                          if lake.exists("transactions") else 0, job, 20.0, timeout_s)
        print(f"cluster-demo: {why}")
        apps = master_state(cluster.master_ui).get("activeapps", [])
        for app in apps:
            print(f"application {app['id']} ({app['name']}) on the cluster with "
                  f"{app['cores']} core(s); executor logs: "
                  f"{', '.join(map(str, executor_logs(cluster, app['id']))) or 'none'}")
        print("".join(line for line in log.read_text(errors="replace").splitlines(True)
                      if SESSION_LINE in line), end="")
    finally:
        if sim is not None:
            sim.stop()
        if job is not None:
            code = stop_job(job)
        print(f"job stopped (exit code {code}); {stop(home)}")
    print(f"\n== rows per table under {lake.root} ==")
    for name, count in _table_rows(settings).items():
        print(f"  {name:<14} {count:>7}")
    print(f"job log: {log}; cluster logs: {home.resolve()}")
    return 0 if code == 0 and apps else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.cluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status", "recipe", "demo"])
    parser.add_argument("--dir", default=DEFAULT_DIR, help="its PID files, logs, work dir")
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--conf-file", default="conf/local.yaml", help="demo: the job's conf")
    parser.add_argument("--transactions", type=int, default=300, help="demo: how many")
    parser.add_argument("--seed", type=int, default=7, help="demo: the simulator's seed")
    parser.add_argument("--timeout", type=float, default=900.0, help="demo: seconds at most")
    args = parser.parse_args(argv)
    from pipeline.config import ConfigError

    home = Path(args.dir)
    try:
        if args.action == "start":
            cluster = start(home, worker_cores=args.worker_cores,
                            worker_memory=args.worker_memory)
            print(f"cluster started: master {cluster.master_url} (UI {cluster.master_ui}), "
                  f"one worker (UI {cluster.worker_ui}, work dir {cluster.work_dir})")
        elif args.action == "stop":
            print(stop(home))
        elif args.action == "status":
            cluster = status(home)
            print(f"cluster running: master {cluster.master_url}" if cluster
                  else "cluster not running")
        elif args.action == "demo":
            return demo(home, Path(args.conf_file), transactions=args.transactions,
                        seed=args.seed, timeout_s=args.timeout)
        else:
            print(RECIPE, end="")
    except (ClusterError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
