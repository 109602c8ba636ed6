"""The stall alerts: Prometheus rules under the real promtool, Grafana rules on the views."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from work_ledger.readside.roles import READ_VIEWS
from work_ledger.service.ledger import Ledger

DEPLOY = Path(__file__).parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "work-ledger.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "work-ledger.rules.test.yml"
GRAFANA_ALERTS = DEPLOY / "grafana" / "provisioning" / "alerting" / "work-ledger.yaml"
RELATION = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_.]*)", re.IGNORECASE)
# Grafana rule title → (Prometheus alert, threshold, for): one set of documented thresholds.
SAME_ALERT = {
    "Stalled units": ("WorkLedgerUnitsStalled", 0, "10m"),
    "Questions waiting too long": ("WorkLedgerQuestionWaitingTooLong", 14400, "5m"),
}


def _grafana_rules() -> list[dict[str, Any]]:
    provisioned = yaml.safe_load(GRAFANA_ALERTS.read_text(encoding="utf-8"))
    return [rule for group in provisioned["groups"] for rule in group["rules"]]


def _sql(rule: dict[str, Any]) -> str:
    (query,) = [d["model"]["rawSql"] for d in rule["data"] if d["datasourceUid"] == "work-ledger"]
    return str(query)


def test_prometheus_rules_pass_promtool_unit_tests() -> None:
    """`promtool test rules`: each alert fires after its `for`, once across replicas."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install -y prometheus)")
    result = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_grafana_and_prometheus_alerts_share_their_thresholds() -> None:
    """Each Grafana rule has a Prometheus twin with the same threshold and duration."""
    prometheus = {
        rule["alert"]: rule
        for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    }
    grafana = {rule["title"]: rule for rule in _grafana_rules()}
    assert set(grafana) == set(SAME_ALERT)
    for title, (alert, threshold, duration) in SAME_ALERT.items():
        (evaluator,) = [
            c["evaluator"]
            for d in grafana[title]["data"]
            if d["model"].get("type") == "threshold"
            for c in d["model"]["conditions"]
        ]
        assert (evaluator["type"], evaluator["params"], grafana[title]["for"]) == (
            "gt",
            [threshold],
            duration,
        )
        assert prometheus[alert]["expr"].endswith(f"> {threshold}")
        assert prometheus[alert]["for"] == duration


async def test_grafana_alert_queries_read_views_as_the_reader(
    seeded: Ledger, reader: asyncpg.Connection
) -> None:
    """Each alert query names views only and runs as the read-only role; o3 is stalled."""
    values = {}
    for rule in _grafana_rules():
        sql = _sql(rule)
        assert set(RELATION.findall(sql)) <= set(READ_VIEWS), rule["title"]
        values[rule["title"]] = await reader.fetchval(sql)
    assert values["Stalled units"] == 1
    assert 0 <= values["Questions waiting too long"] < 14400
