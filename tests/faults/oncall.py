"""The on-call engineer's view of one job run: a real Prometheus scraping the job's endpoint
with the project's rules, and a real Alertmanager (the example configuration) paging to a
webhook receiver, around a run an existing fault test makes anyway (no JVM start of its own).

``OnCall`` starts the servers, gives the run's conf what it needs (the endpoint's port,
``alertmanager.url``, a file watch every 6 s and in-job maintenance, so every metric has data
in a one-minute run) and checks afterwards:

- every dashboard panel's query and every rule's expression (comparisons made ``bool``:
  ``monitor_servers.as_measure``) returns data from the job, and every rule evaluates;
- the served metrics are those of docs/metrics.md;
- each unrecoverable gap reached the pager through Alertmanager and is resolved once an
  operator acknowledges it with ``urbpipe gaps ack``.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from devtools.cluster import free_ports
from pipeline.config import Settings
from pipeline.ops.cli import main
from pipeline.ops.dashboard import panels
from tests.support.monitor_servers import (
    Webhook,
    alertmanager,
    as_measure,
    documented_metrics,
    panel_query,
    prometheus,
    query,
    rule_expressions,
    served_metrics,
)


class OnCall:
    """Prometheus and Alertmanager around one run of the job (a context manager)."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "oncall"
        (self.port,) = free_ports(1)
        self.stream: dict[str, Any] = {"prometheus_port": self.port}
        self.sections: dict[str, Any] = {}
        self.prom_url = self.am_url = ""
        self.webhook = Webhook()
        self._stack = ExitStack()
        self._listeners: list[tuple[Any, Any]] = []

    def __enter__(self) -> OnCall:
        self._stack.callback(self.webhook.close)
        self.am_url = self._stack.enter_context(alertmanager(self.home / "am", self.webhook))
        self.prom_url = self._stack.enter_context(
            prometheus(self.home / "prometheus", f"127.0.0.1:{self.port}"))
        self.sections = {"alertmanager": {"url": self.am_url},
                         "maintenance": {"every_minutes": 60, "watch_minutes": 0.1}}
        return self

    def __exit__(self, *exc: object) -> None:
        for spark, listener in self._listeners:  # the shared session outlives the test
            listener.close()
            spark.streams.removeListener(listener)
        self._stack.close()

    def observe(self, spark: Any, settings: Settings) -> Any:
        """``job_metrics``, remembered so the endpoint is closed at the end."""
        from pipeline.ops.metrics import job_metrics

        metrics = job_metrics(spark, settings)
        self._listeners.append((spark, metrics.listener))
        return metrics

    # -- Prometheus ------------------------------------------------------------------------

    def _scraped(self, samples: int) -> bool:
        found = query(self.prom_url, f'count_over_time(up{{job="urbpipe"}}[1m]) >= {samples} '
                                     'and up{job="urbpipe"} == 1')
        return bool(found)

    def check_prometheus(self) -> None:
        deadline = time.monotonic() + 60
        while not self._scraped(10):
            assert time.monotonic() < deadline, "Prometheus did not scrape the job"
            time.sleep(0.5)
        # The endpoint follows Spark's listener bus, which can run behind the batches when the
        # session (or the machine) is busy: every panel and rule must have data within a minute.
        deadline = time.monotonic() + 60
        while empty := self._without_data():
            assert time.monotonic() < deadline, (
                "no data from the running job for:\n" + "\n".join(empty))
            time.sleep(1)
        rules = json.loads(urllib.request.urlopen(f"{self.prom_url}/api/v1/rules",
                                                  timeout=10).read())["data"]["groups"]
        broken = [(r["name"], r.get("lastError")) for g in rules for r in g["rules"]
                  if r["health"] != "ok"]
        assert not broken, broken
        # the rule must fire, within a minute of the run's end
        deadline = time.monotonic() + 60
        while not query(self.prom_url, 'ALERTS{alertname="UrbpipeGapUnrecoverable"}'):
            seen = query(self.prom_url,
                         'urbpipe_gap_transitions_total{state="unrecoverable"}[5m]')
            assert time.monotonic() < deadline, (
                f"the rule must fire for the run's unrecoverable gaps; the counter: {seen}")
            time.sleep(1)
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                      timeout=10).read().decode()
        table, served = documented_metrics(), served_metrics(body)
        assert set(served) <= set(table), sorted(set(served) - set(table))
        assert all(served[n] == table[n] for n in served)

    def _without_data(self) -> list[str]:
        """The panels' queries and the rules' expressions Prometheus has no data for."""
        empty = [f"panel {p.title!r}: {q.expr}" for p in panels() for q in p.queries
                 if not query(self.prom_url, panel_query(q.expr))]
        return empty + [f"rule {name}: {as_measure(expr)}"
                        for name, expr in rule_expressions().items()
                        if not query(self.prom_url, as_measure(expr))]

    # -- Alertmanager ----------------------------------------------------------------------

    def check_pages_until_acked(self, conf: Path, refs: list[str]) -> None:
        """Each gap (DEST/SUB/GAP_ID) paged as gap_unrecoverable, resolved by its ack."""
        def page(ref: str, status: str, seen: list[tuple[str, str, dict[str, str]]]) -> bool:
            dest, sub, gap = ref.split("/")
            return any(r == "pager" and s == status and lb.get("gap") == gap
                       and (lb.get("destination"), lb.get("subscription")) == (dest, sub)
                       and lb["alertname"] == "gap_unrecoverable" for r, s, lb in seen)

        self.webhook.wait_for(lambda seen: all(page(r, "firing", seen) for r in refs))
        for ref in refs:
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["gaps", "ack", ref, "--conf-file", str(conf), "--by", "oncall",
                             "--note", "e2e: nothing to resync"]) == 0
        self.webhook.wait_for(lambda seen: all(page(r, "resolved", seen) for r in refs))
