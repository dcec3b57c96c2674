"""The Prometheus rules and the example Alertmanager configuration, checked by the tools that
load them: ``promtool check rules`` and ``promtool test rules`` (the unit tests in
monitoring/prometheus/urbpipe-rules.test.yml), ``amtool check-config`` and
``amtool config routes test`` (Debian's prometheus and prometheus-alertmanager, installed by
``scripts/setup.sh --tools``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.ops.prometheus import CATALOG
from tests.support.monitor_servers import EXAMPLE_ALERTMANAGER, RULES, tool

ROOT = Path(__file__).resolve().parents[3]
RULE_TESTS = RULES.with_name("urbpipe-rules.test.yml")


def run(*argv: str, cwd: Path = RULES.parent) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rules() -> None:
    done = run(tool("promtool"), "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = run(tool("promtool"), "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_unit_tested_firing() -> None:
    tested = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels",
                            RULE_TESTS.read_text()))
    assert {r["alert"] for r in alert_rules()} == tested


def test_every_alert_has_a_severity_a_summary_and_its_runbook_section() -> None:
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["runbook_url"].endswith(f"#{rule['alert'].lower()}")


def test_the_rules_name_only_catalogued_metrics() -> None:
    names = {m.name for m in CATALOG} | {"up"}
    text = RULES.read_text()
    used = set(re.findall(r"\b(urbpipe_[a-z0-9_]+)", text)) | set(
        re.findall(r"\b(up)\{", text))
    assert used <= names, used - names


def test_amtool_accepts_the_example_configuration() -> None:
    done = run(tool("amtool"), "check-config", str(EXAMPLE_ALERTMANAGER))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("labels", "receiver"), [
    (["severity=critical", "alertname=UrbpipeGapUnrecoverable", "subscription=COLOR"], "pager"),
    (["severity=critical", "alertname=gap_unrecoverable", "subscription=COLOR",
      "job=urbpipe"], "pager"),
    (["severity=warning", "alertname=gap_open", "subscription=COLOR"], "tickets"),
    (["severity=warning", "alertname=UrbpipeFileStale"], "tickets"),
    (["severity=info", "alertname=gap_filled"], "blackhole"),
])
def test_alertmanager_routes_by_severity(labels: list[str], receiver: str) -> None:
    done = run(tool("amtool"), "config", "routes", "test",
               f"--config.file={EXAMPLE_ALERTMANAGER}", f"--verify.receivers={receiver}",
               *labels)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == receiver


def test_alertmanager_groups_by_subscription() -> None:
    conf = yaml.safe_load(EXAMPLE_ALERTMANAGER.read_text())
    assert "subscription" in conf["route"]["group_by"]
    (inhibit,) = conf["inhibit_rules"]
    assert inhibit["equal"] == ["job"]
