"""/metrics: gauges equal to the views, counters of claims and refusals, latency by route."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from asyncpg import Pool
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from support.served_app import app_running, settings_for
from work_ledger.api.collectors import LedgerMetrics
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

OPERATOR = Actor("operator", privileged=True)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    """Every sample of the exposition, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _gauge(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def _assert_gauges_match_views(samples: Samples, raw: asyncpg.Connection) -> None:
    states = (
        "ready",
        "waiting",
        "claimed",
        "in_progress",
        "blocked",
        "verified",
        "done",
        "abandoned",
    )
    rows = await raw.fetch("SELECT * FROM v_queue_depth WHERE scope = 'domain'")
    assert len(rows) == 3
    for row in rows:
        for state in states:
            value = _gauge(samples, "work_ledger_units", domain=row["domain"], state=state)
            assert value == row[state]
        stalled = await raw.fetchval(
            "SELECT count(*) FROM v_stall_list WHERE domain = $1", row["domain"]
        )
        assert _gauge(samples, "work_ledger_stalled_units", domain=row["domain"]) == stalled
    units = [v for (name, _), v in samples.items() if name == "work_ledger_units"]
    assert len(units) == 3 * len(states)


@pytest.fixture
async def app(seeded: Ledger, database_url: str, tmp_path: Path) -> AsyncIterator[FastAPI]:
    """The real application over the seeded database, its lifespan running."""
    async with app_running(settings_for(database_url, tmp_path, secret="test-secret")) as app:
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as client:
        yield client


async def _agent(app: FastAPI, client: httpx.AsyncClient, name: str) -> dict[str, str]:
    token, _ = await app.state.tokens.create(Role.AGENT, name)
    return {"Authorization": f"Bearer {token}"}


async def test_metrics_module_gauges_match_the_views(
    seeded: Ledger, pool: Pool, raw: asyncpg.Connection
) -> None:
    """Straight from the module: queue depth, stalls, claims and reclaims as the views say."""
    metrics = LedgerMetrics()
    await metrics.refresh(pool)
    samples = _samples(metrics.render().decode())
    await _assert_gauges_match_views(samples, raw)
    claims = {"billing": 3, "orders": 5, "search": 2}
    reclaims = {"billing": 1, "orders": 0, "search": 0}
    for domain in claims:
        assert _gauge(samples, "work_ledger_claims_total", domain=domain) == claims[domain]
        assert _gauge(samples, "work_ledger_reclaims_total", domain=domain) == reclaims[domain]


async def test_metrics_endpoint_parses_and_gauges_match_the_views(
    client: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """GET /metrics is Prometheus text whose gauges equal the views."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    await _assert_gauges_match_views(_samples(response.text), raw)


async def test_metrics_count_claims_and_refusals_by_invariant(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """A new claim, a resumed one, an empty poll, and a 409 naming its invariant."""
    agent = await _agent(app, client, "agent-x")
    assert (await client.post("/units/claim", json={}, headers=agent)).json()["unit"] is not None
    assert (await client.post("/units/claim", json={}, headers=agent)).json()["resumed"] is True
    other = await _agent(app, client, "agent-y")
    assert (await client.post("/units/claim", json={}, headers=other)).json()["unit"] is None
    refused = await client.post("/units/o3/claim", json={}, headers=other)
    assert refused.status_code == 409
    invariant = refused.json()["invariant"]

    samples = _samples((await client.get("/metrics")).text)
    for result in ("new", "resumed", "none"):
        assert _gauge(samples, "work_ledger_claim_responses_total", result=result) == 1
    key = {"code": "invariant_violation", "invariant": invariant}
    assert _gauge(samples, "work_ledger_refusals_total", **key) == 1


async def test_metrics_time_requests_by_route_template(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Latency is labelled by the route template, never the raw path."""
    agent = await _agent(app, client, "agent-x")
    for ref in ("b1", "o1", "s1"):
        assert (await client.get(f"/units/{ref}", headers=agent)).status_code == 200
    await client.get("/no/such/path")
    samples = _samples((await client.get("/metrics")).text)
    routes = {
        dict(labels)["route"]
        for (name, labels), _ in samples.items()
        if name == "work_ledger_request_duration_seconds_count"
    }
    assert "/units/{unit:path}" in routes
    assert "unmatched" in routes
    assert not any(r.startswith("/units/b") for r in routes)
    count = _gauge(
        samples,
        "work_ledger_request_duration_seconds_count",
        method="GET",
        route="/units/{unit:path}",
        status="200",
    )
    assert count == 3


async def test_metrics_gauges_are_cached_and_never_read_by_requests(
    app: FastAPI, client: httpx.AsyncClient, seeded: Ledger
) -> None:
    """Only a scrape reads the views, and a second scrape within the cache reuses it."""
    metrics: LedgerMetrics = app.state.metrics
    await client.get("/healthz")
    assert metrics.snapshot is None
    first = _samples((await client.get("/metrics")).text)
    await seeded.register([NewUnit("n1", "fleet-a", "newdomain")], OPERATOR)
    cached = _samples((await client.get("/metrics")).text)
    assert not any(dict(labels).get("domain") == "newdomain" for _, labels in cached)
    assert _gauge(cached, "work_ledger_units", domain="orders", state="claimed") == _gauge(
        first, "work_ledger_units", domain="orders", state="claimed"
    )
    metrics.cache_seconds = 0
    fresh = _samples((await client.get("/metrics")).text)
    assert _gauge(fresh, "work_ledger_units", domain="newdomain", state="ready") == 1


async def test_metrics_gauge_waiting_units_budgets_and_the_parked(
    seeded: Ledger, pool: Pool
) -> None:
    """A unit held by the DEAD s3, one parked at its attempt limit (1 attempt, released
    failed), and a budget: each has its gauge, as v_waiting and v_budget say."""
    operator = Actor("operator", privileged=True)
    await seeded.set_budget("fleet-a", 1_000, operator)
    await seeded.register(
        [
            NewUnit("held", "fleet-a", "search", requires=("s3",)),
            NewUnit("parked", "fleet-a", "orders", max_attempts=1),
        ],
        operator,
    )
    claim = await seeded.claim_named("parked", "agent-p", lease_seconds=60)
    assert claim.attempt is not None
    await seeded.release("parked", Actor("agent-p"))
    metrics = LedgerMetrics()
    await metrics.refresh(pool)
    samples = _samples(metrics.render().decode())
    waiting = "work_ledger_waiting_units"
    assert _gauge(samples, waiting, domain="search", reason="dead_prerequisite") == 1
    assert _gauge(samples, waiting, domain="orders", reason="attempt_limit") == 1
    assert _gauge(samples, waiting, domain="billing", reason="attempt_limit") == 0
    assert _gauge(samples, "work_ledger_parked_units", domain="orders") == 1
    assert _gauge(samples, "work_ledger_oldest_dead_held_seconds", domain="search") >= 0
    spent = _gauge(samples, "work_ledger_budget_spent_cents", fleet="fleet-a", domain="(all)")
    assert spent == 360  # every cost of the seeded ledger is fleet-a's
    remaining = _gauge(
        samples, "work_ledger_budget_remaining_cents", fleet="fleet-a", domain="(all)"
    )
    assert remaining == 640


async def test_metrics_gauge_each_controlled_scope_live_cap_and_pause(
    seeded: Ledger, pool: Pool, raw: asyncpg.Connection
) -> None:
    """A capped fleet and a paused domain: live against the cap, paused (1/0), and ready
    units, as v_controls says; an uncapped scope has no cap sample."""
    from work_ledger.domain.flow import ControlChange

    await seeded.set_controls(ControlChange("fleet-a", "ramp", max_live=7), OPERATOR)
    await seeded.set_controls(
        ControlChange("fleet-a", "weekend", domain="orders", paused=True), OPERATOR
    )
    metrics = LedgerMetrics()
    await metrics.refresh(pool)
    samples = _samples(metrics.render().decode())
    for row in await raw.fetch("SELECT * FROM v_controls"):
        domain = row["domain"] or "(all)"
        live = _gauge(samples, "work_ledger_scope_live_units", fleet="fleet-a", domain=domain)
        assert live == row["live"]
        ready = _gauge(samples, "work_ledger_scope_ready_units", fleet="fleet-a", domain=domain)
        assert ready == row["ready"]
    assert _gauge(samples, "work_ledger_scope_max_live", fleet="fleet-a", domain="(all)") == 7
    assert ("work_ledger_scope_max_live", (("domain", "orders"), ("fleet", "fleet-a"))) not in (
        samples
    )
    assert _gauge(samples, "work_ledger_scope_paused", fleet="fleet-a", domain="orders") == 1
    assert _gauge(samples, "work_ledger_scope_paused", fleet="fleet-a", domain="(all)") == 0
