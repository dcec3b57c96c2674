"""Real monitoring servers for tests: Alertmanager and Prometheus (Debian's packages, installed
by ``scripts/setup.sh --tools``), and a webhook receiver the test runs.

Each server is its own process on free ports with its data in a tmp folder, stopped by its
PID at the end. Alertmanager runs the example configuration of
monitoring/alertmanager/alertmanager.yml with its receivers pointed at the webhook and its
waits shortened, so a test sees the routing users get, in seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster import free_ports

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_ALERTMANAGER = ROOT / "monitoring" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "monitoring" / "prometheus" / "urbpipe-rules.yml"


def tool(name: str) -> str:
    """The path of a Debian monitoring tool; fails with what installs it."""
    path = shutil.which(name)
    assert path, (f"{name} is not installed: scripts/setup.sh --tools installs Debian's "
                  "prometheus and prometheus-alertmanager (make test runs it)")
    return path


class Webhook:
    """An HTTP server that keeps every JSON body POSTed to it (Alertmanager's webhook)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self) -> list[tuple[str, str, dict[str, str]]]:
        """(receiver, status, labels) of every alert notified so far, in order."""
        return [(b["receiver"], a["status"], a["labels"]) for b in list(self.bodies)
                for a in b["alerts"]]

    def wait_for(self, found: Callable[[list[tuple[str, str, dict[str, str]]]], bool],
                 timeout_s: float = 30.0) -> list[tuple[str, str, dict[str, str]]]:
        deadline = time.monotonic() + timeout_s
        while not found(self.alerts()):
            assert time.monotonic() < deadline, f"not notified in {timeout_s:.0f}s: " \
                                                f"{self.alerts()}"
            time.sleep(0.2)
        return self.alerts()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except (urllib.error.URLError, OSError):
            assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"{url} not ready: {log.read_text()[-2000:]}"
            time.sleep(0.2)


@contextmanager
def _serve(home: Path, name: str, argv: Callable[[int], list[str]]) -> Iterator[str]:
    """``argv(port)`` run in ``home`` on a free port, its output in ``<name>.log``, until it
    answers ``/-/ready``; its URL. Stopped by its PID (TERM, then KILL) at the end."""
    (port,) = free_ports(1)
    log = home / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv(port), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=home)
    url = f"http://127.0.0.1:{port}"
    try:
        _ready(f"{url}/-/ready", proc, log)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)


@contextmanager
def alertmanager(home: Path, webhook: Webhook) -> Iterator[str]:
    """The example configuration's Alertmanager, every receiver the webhook; its URL."""
    conf = yaml.safe_load(EXAMPLE_ALERTMANAGER.read_text())
    conf["route"].update(group_wait="1s", group_interval="1s")
    for receiver in conf["receivers"]:
        for hook in receiver.get("webhook_configs", ()):
            hook["url"] = webhook.url
    home.mkdir(parents=True, exist_ok=True)
    (home / "alertmanager.yml").write_text(yaml.safe_dump(conf))
    with _serve(home, "alertmanager", lambda port: [
            tool("prometheus-alertmanager"), f"--config.file={home / 'alertmanager.yml'}",
            f"--storage.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=", "--log.level=warn"]) as url:
        yield url


def alertmanager_alerts(url: str) -> list[dict[str, Any]]:
    """Alertmanager's current alerts (with their status: active, inhibited …)."""
    return json.loads(urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5).read())


@contextmanager
def prometheus(home: Path, target: str, *, scrape_s: float = 1.0) -> Iterator[str]:
    """A Prometheus server scraping ``target`` (host:port) as job ``urbpipe`` every
    ``scrape_s`` with the project's rules loaded (evaluated as often); its URL."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(RULES, home / RULES.name)
    every = f"{int(scrape_s * 1000)}ms"
    (home / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "rule_files": [RULES.name],
        "scrape_configs": [{"job_name": "urbpipe", "static_configs": [{"targets": [target]}]}],
    }))
    with _serve(home, "prometheus", lambda port: [
            tool("prometheus"), f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn"]) as url:
        yield url


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's result (vector), through Prometheus' HTTP API."""
    answer = json.loads(urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10).read())
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    return result if answer["data"]["resultType"] == "vector" else [result]


_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool\b)")


def as_measure(expr: str) -> str:
    """A rule's expression with each comparison made ``bool``: the series it compares, 0 or 1
    each, instead of only those past the threshold. A rule that is not firing then still
    shows whether its metrics and label matching find data. Label matchers are left alone."""
    parts = re.split(r"(\{[^}]*\})", expr)
    return "".join(part if part.startswith("{") else _COMPARISON.sub(r"\1 bool", part)
                   for part in parts)


def panel_query(expr: str, rate_interval: str = "1m") -> str:
    """A dashboard query as Grafana sends it with every subscription selected."""
    return expr.replace("$subscription", ".*").replace("$__rate_interval", rate_interval)


def rule_expressions() -> dict[str, str]:
    """Every rule of the rules file by name (alert or record) → its expression."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r.get("alert") or r["record"]: r["expr"] for g in groups for r in g["rules"]}


def documented_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """docs/metrics.md's table: name → (type, labels sorted)."""
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([^|]+) \|",
                      (ROOT / "docs" / "metrics.md").read_text(), re.MULTILINE)
    return {name: (kind, tuple(sorted(re.findall(r"`(\w+)`", labels))))
            for name, kind, labels in rows}


def served_metrics(body: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """An exposition's samples: name → (type, labels sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {sample.name: (family.type, tuple(sorted(sample.labels)))
            for family in text_string_to_metric_families(body) for sample in family.samples}
