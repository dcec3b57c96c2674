"""``python -m pipeline.ops.monitoring``: write (or check) the monitoring files generated from
code — the metric table (docs/metrics.md, from ``pipeline.ops.prometheus.CATALOG``) and the
Grafana dashboard (monitoring/grafana/urbpipe-dashboard.json, from
``pipeline.ops.dashboard``) — and say where everything an on-call engineer needs is.

    python -m pipeline.ops.monitoring write      # regenerate both files
    python -m pipeline.ops.monitoring check      # exit 1 when a file differs from the code
    python -m pipeline.ops.monitoring where      # the endpoint, rules, dashboard, runbook
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pipeline.config import Settings
from pipeline.ops.dashboard import dashboard_json
from pipeline.ops.prometheus import metrics_table

ROOT = Path(__file__).resolve().parents[2]
METRICS_DOC = Path("docs/metrics.md")
DASHBOARD = Path("monitoring/grafana/urbpipe-dashboard.json")
RULES = Path("monitoring/prometheus/urbpipe-rules.yml")
RULE_TESTS = Path("monitoring/prometheus/urbpipe-rules.test.yml")
ALERTMANAGER = Path("monitoring/alertmanager/alertmanager.yml")
RUNBOOK = Path("docs/runbook.md")
#: Each generated file and the code that makes it.
GENERATED: dict[Path, Callable[[], str]] = {METRICS_DOC: metrics_table, DASHBOARD: dashboard_json}


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files whose content is not their generator's output."""
    return [path for path, make in GENERATED.items()
            if not (root / path).exists() or (root / path).read_text() != make()]


def where(settings: Settings) -> list[str]:
    """Lines that tell an operator where the metrics, rules, dashboard and runbook are."""
    st = settings.stream
    endpoint = (f"http://{st.prometheus_address}:{st.prometheus_port}/metrics"
                if st.prometheus_port else "off (set stream.prometheus_port)")
    am = settings.alertmanager.url or "off (set alertmanager.url)"
    return [f"metrics:      {endpoint}; per batch in {settings.location(st.metrics_file)}; "
            f"every metric: {ROOT / METRICS_DOC}",
            f"alert rules:  {ROOT / RULES} (promtool tests: {ROOT / RULE_TESTS})",
            f"alertmanager: example config {ROOT / ALERTMANAGER}; the job's own alerts: {am}",
            f"dashboard:    {ROOT / DASHBOARD} (Grafana: Dashboards → Import)",
            f"runbook:      {ROOT / RUNBOOK}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ops.monitoring",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("write", "check", "where"))
    parser.add_argument("--conf-file", help="the job's conf (for where)")
    args = parser.parse_args(argv)
    if args.action == "write":
        for path, make in GENERATED.items():
            (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
            (ROOT / path).write_text(make())
            print(f"wrote {path}")
        return 0
    if args.action == "check":
        differ = stale()
        for path in differ:
            print(f"error: {path} differs from its generator: run python -m "
                  "pipeline.ops.monitoring write", file=sys.stderr)
        return 1 if differ else 0
    from pipeline.config import load_settings

    print("\n".join(where(load_settings(args.conf_file))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
