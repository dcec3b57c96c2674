"""The catalog's metastore: Spark's Hive support, and the embedded setup's Derby network server.

Why a network server: pyspark ships Apache Derby embedded, and an embedded Derby database admits
one JVM at a time, so while the job held the metastore no notebook, ``urbpipe catalog sync`` or
SQL endpoint could open it. With ``catalog.metastore: local`` the database runs in Derby's
network server (derbynet, ``jvm/catalog/pom.xml``), a small Java process on 127.0.0.1 kept
beside the lake (``catalog.local.dir``), started by the first session that needs it and left
running like the local broker; every Spark session (each its own JVM) reaches it through
Derby's client driver. That driver must be on the driver JVM's own class path
(``spark.driver.extraClassPath``; ``--driver-class-path`` under spark-submit): the Hive client
loads its JDBC driver through the application class loader, which ``spark.jars`` never reach.

With ``catalog.metastore: spark`` nothing is started: the session takes whatever ``spark.conf``
(or a ``hive-site.xml``) names, an external Hive metastore or AWS Glue.

    python -m pipeline.spark.engine.metastore start|stop|status [--conf-file conf/local.yaml]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.pidfile import running_pid

START_TIMEOUT_S = 60.0
#: The Derby client driver's class (derbyclient): what the Hive client loads by name.
CLIENT_DRIVER = "org.apache.derby.jdbc.ClientDriver"
_SERVER_MAIN = "org.apache.derby.drda.NetworkServerControl"


class MetastoreError(ConfigError):
    """A one-line, operator-readable reason the metastore server could not start or stop (a
    ConfigError: the job exits 2 with it, like any set-up it cannot work with)."""


def local_dir(settings: Settings) -> Path:
    """Where the embedded metastore lives: ``catalog.local.dir``, else beside the lake
    (``<lake_dir>-catalog``), or ``.run/catalog`` for a lake on an object store."""
    local = settings.catalog.local
    if local.dir:
        return Path(settings.location(local.dir))
    lake = settings.location(settings.stream.lake_dir).rstrip("/")
    if urlparse(lake).scheme not in ("", "file"):
        return Path(settings.location(".run/catalog"))
    return Path(lake.removeprefix("file://") + "-catalog")


def connection_url(settings: Settings) -> str:
    """The metastore database's JDBC URL: an absolute path on the server (``//…``), so two
    confs that share a port never share a database by accident."""
    db = local_dir(settings) / "metastore_db"
    return f"jdbc:derby://127.0.0.1:{settings.catalog.local.port}/{db};create=true"


def client_jar(settings: Settings) -> str:
    """Derby's client driver jar (``.jars/catalog``, from ``jvm/catalog/pom.xml``)."""
    jars = Path(settings.location(settings.catalog.local.jars_dir))
    found = sorted(jars.glob("derbyclient-*.jar"))
    if not found:
        raise MetastoreError(f"no Derby client driver in {jars} (needed by "
                             "catalog.metastore: local): run `scripts/setup.sh` first")
    return str(found[-1].resolve())


def driver_class_path(settings: Settings) -> list[str]:
    """What the driver JVM's own class path needs for this conf's catalog (may be empty)."""
    catalog = settings.catalog
    return [client_jar(settings)] if catalog.enabled and catalog.metastore == "local" else []


def catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark settings of the catalog: Hive support when enabled, and for ``local`` the
    Derby server's database (the client driver's class path is the session's to merge)."""
    catalog = settings.catalog
    if not catalog.enabled:
        return {}
    conf = {"spark.sql.catalogImplementation": "hive"}
    if catalog.metastore == "local":
        conf.update({
            "spark.hadoop.javax.jdo.option.ConnectionURL": connection_url(settings),
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": CLIENT_DRIVER,
            # a new database gets the metastore's tables at its first use
            "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
            "spark.hadoop.hive.metastore.schema.verification": "false",
        })
    return conf


def _pid_file(settings: Settings) -> Path:
    return local_dir(settings) / "derby.pid"


def _running_pid(settings: Settings) -> int | None:
    return running_pid(_pid_file(settings))


def _answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _server_command(settings: Settings) -> list[str]:
    local = settings.catalog.local
    jars = Path(settings.location(local.jars_dir))
    if not any(jars.glob("derbynet-*.jar")):
        raise MetastoreError(f"Derby's network server missing in {jars}: run "
                             "`scripts/setup.sh` first")
    return ["java", f"-Xmx{local.heap}", f"-Dderby.system.home={local_dir(settings)}",
            "-cp", f"{jars}/*", _SERVER_MAIN, "start", "-h", "127.0.0.1",
            "-p", str(local.port)]


def ensure(settings: Settings) -> str:
    """Start the embedded metastore's server unless it runs (``local`` only). Two processes
    starting at once (the job and a notebook) take turns on a lock file: one starts it, the
    other finds it running."""
    if not (settings.catalog.enabled and settings.catalog.metastore == "local"):
        return "no local metastore in this conf"
    home = local_dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    with (home / "start.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _start_locked(settings)


def _start_locked(settings: Settings) -> str:
    port = settings.catalog.local.port
    where = f"127.0.0.1:{port}, database in {local_dir(settings)}"
    pid = _running_pid(settings)
    if pid is not None:
        _wait_answering(settings, pid)
        return f"metastore already running on {where} (pid {pid})"
    if _answers(port):
        raise MetastoreError(f"port {port} on 127.0.0.1 is taken by another process; free it "
                             "or change catalog.local.port")
    log = (local_dir(settings) / "derby-server.log").open("ab")
    proc = subprocess.Popen(_server_command(settings), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    _pid_file(settings).write_text(str(proc.pid))
    _wait_answering(settings, proc.pid)
    return f"metastore started on {where} (pid {proc.pid})"


def _wait_answering(settings: Settings, pid: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(settings.catalog.local.port):
        if _gone(pid):
            raise MetastoreError("the metastore server exited during start; see "
                                 f"{local_dir(settings) / 'derby-server.log'}")
        if time.monotonic() > deadline:
            raise MetastoreError(f"the metastore server did not answer within "
                                 f"{START_TIMEOUT_S:.0f}s")
        time.sleep(0.2)


def _gone(pid: int) -> bool:
    """Has ``pid`` exited? Reaps it first if this process started it (a zombie still
    answers kill(pid, 0))."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except OSError:
        return True
    return False


def stop(settings: Settings, timeout_s: float = 30.0) -> str:
    """Stop the server by its PID: SIGTERM (Derby recovers its log at the next boot whatever
    the stop), SIGKILL after ``timeout_s``."""
    pid = _running_pid(settings)
    if pid is None:
        _pid_file(settings).unlink(missing_ok=True)
        return "metastore not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not _gone(pid):
        os.kill(pid, signal.SIGKILL)
    _pid_file(settings).unlink(missing_ok=True)
    return f"metastore stopped (pid {pid})"


def status(settings: Settings) -> str:
    pid = _running_pid(settings)
    if pid is None:
        return "metastore not running"
    return (f"metastore running on 127.0.0.1:{settings.catalog.local.port}, database in "
            f"{local_dir(settings)} (pid {pid})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.spark.engine.metastore",
                                     description="Start/stop the embedded catalog's metastore "
                                                 "(Derby network server, catalog.local).")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--conf-file", default=None, help="YAML configuration (conf/local.yaml)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.conf_file)
        print({"start": ensure, "stop": stop, "status": status}[args.action](settings))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
