"""deploy/grafana: every query of the dashboard runs, as the read-only role, on views only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from work_ledger.domain.flow import ControlChange
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.readside.roles import READ_VIEWS
from work_ledger.service.ledger import Ledger

GRAFANA = Path(__file__).parents[2] / "deploy" / "grafana" / "provisioning"
DASHBOARD = GRAFANA / "dashboards" / "work-ledger.json"
DATASOURCE = GRAFANA / "datasources" / "work-ledger.yaml"
# Grafana's macros and the dashboard's variable, as Grafana expands them.
TIME_FILTER = re.compile(r"\$__timeFilter\((\w+)\)")
RELATION = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_.]*)", re.IGNORECASE)


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _queries() -> list[tuple[str, str]]:
    """(where, sql) for every panel target and every templating variable."""
    dashboard = _dashboard()
    found = [
        (f"panel {panel['title']!r}", target["rawSql"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    found += [(f"variable {v['name']}", v["query"]) for v in dashboard["templating"]["list"]]
    return found


def _expand(sql: str, domain: str) -> str:
    sql = TIME_FILTER.sub(
        r"\1 BETWEEN now() - interval '30 days' AND now() + interval '1 day'", sql
    )
    sql = sql.replace("${domain:sqlstring}", "'" + domain.replace("'", "''") + "'")
    assert "$" not in sql, f"a Grafana macro this test does not expand: {sql}"
    return sql


def test_dashboard_has_a_panel_for_each_question() -> None:
    """Queue depth, stalls, cost per unit and per merged unit, rework over time, kill gate."""
    titles = {p["title"] for p in _dashboard()["panels"]}
    for wanted in (
        "Queue depth per domain",
        "Stall list",
        "Cost per merged unit",
        "Costliest units",
        "Rework rate over time (by day of disposal)",
        "Dispositions (kill-gate table)",
    ):
        assert wanted in titles
    assert len(_queries()) >= 12


def test_dashboard_queries_read_only_views() -> None:
    """Every relation a query names is one of the five views."""
    for where, sql in _queries():
        relations = set(RELATION.findall(sql))
        assert relations, where
        assert relations <= set(READ_VIEWS), f"{where} reads {relations - set(READ_VIEWS)}"


def test_datasource_provisions_the_reader_from_the_environment() -> None:
    """One PostgreSQL datasource, the uid the dashboard uses, secrets from the environment."""
    provisioned = yaml.safe_load(DATASOURCE.read_text(encoding="utf-8"))
    (source,) = provisioned["datasources"]
    uids = {p["datasource"]["uid"] for p in _dashboard()["panels"] if "datasource" in p}
    assert uids == {source["uid"]}
    assert source["type"] == "grafana-postgresql-datasource"
    assert source["secureJsonData"]["password"] == "${WL_GRAFANA_PG_PASSWORD}"
    assert source["user"] == "${WL_GRAFANA_PG_USER}"
    assert source["jsonData"]["database"] == "${WL_GRAFANA_PG_DATABASE}"


async def test_dashboard_queries_run_as_the_reader_and_return_rows(
    seeded: Ledger, reader: asyncpg.Connection
) -> None:
    """On the seeded ledger (with a budget, a cap and a unit held by the DEAD s3), each query
    (all domains) returns rows, as the read-only role."""
    operator = Actor("operator", privileged=True)
    await seeded.set_budget("fleet-a", 1_000, operator)
    await seeded.register([NewUnit("held", "fleet-a", "search", requires=("s3",))], operator)
    await seeded.set_controls(ControlChange("fleet-a", "ramp", max_live=40), operator)
    for where, sql in _queries():
        rows = await reader.fetch(_expand(sql, "__all"))
        assert rows, f"{where} returned no rows"


async def test_dashboard_queries_run_for_one_domain(
    seeded: Ledger, reader: asyncpg.Connection
) -> None:
    """With the domain variable set (even to an odd name), each query runs; orders' stall shows."""
    for domain in ("orders", "billing", "no-such-domain", "it's"):
        for _, sql in _queries():
            await reader.fetch(_expand(sql, domain))
    stall_panel = next(sql for where, sql in _queries() if "Stall list" in where)
    assert [r["unit"] for r in await reader.fetch(_expand(stall_panel, "orders"))] == ["o3"]
    assert await reader.fetch(_expand(stall_panel, "billing")) == []
