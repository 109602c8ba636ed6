"""Claims over HTTP: 64 concurrent claimers, resumed claims, named claims."""

from __future__ import annotations

import asyncio

import httpx

from support.api_support import Api, register
from work_ledger.service.tokens import Role


async def test_64_http_claimers_20_units_20_distinct_winners(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Three rounds: 64 sub-agents claim at once over real sockets; 20 units, 20 winners."""
    token = await api.token(Role.AGENT, "fleet")
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=api.url, limits=limits, timeout=30) as client:
        for round_no in range(3):
            refs = [f"round{round_no}/unit{i:02d}" for i in range(20)]
            registered = await register(operator, *refs)

            async def claim(i: int, round_no: int = round_no) -> httpx.Response:
                headers = {
                    "Authorization": f"Bearer {token}",
                    "X-WL-Agent": f"fleet/r{round_no}-{i}",
                }
                return await client.post("/units/claim", json={}, headers=headers)

            responses = await asyncio.gather(*(claim(i) for i in range(64)))
            assert {r.status_code for r in responses} == {200}
            won = [r.json() for r in responses if r.json()["unit"] is not None]
            assert len(won) == 20
            assert {w["unit"]["id"] for w in won} == {u["id"] for u in registered}
            assert len({w["unit"]["claimed_by"] for w in won}) == 20
            assert {w["attempt"]["attempt_no"] for w in won} == {1}


async def test_claim_again_returns_the_held_unit_resumed(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """An agent that already holds a live claim gets it back, resumed."""
    await register(operator, "a", "b")
    agent = await api.as_role(Role.AGENT, "agent-1")
    first = (await agent.post("/units/claim", json={})).json()
    again = (await agent.post("/units/claim", json={"lease_seconds": 30})).json()
    assert (again["unit"]["id"], again["attempt"]["id"], again["resumed"]) == (
        first["unit"]["id"],
        first["attempt"]["id"],
        True,
    )


async def test_claim_by_domain_and_by_name(api: Api, operator: httpx.AsyncClient) -> None:
    """Pull-next honours domain; a named claim takes exactly that unit, by external_ref."""
    await register(operator, "orders/1", domain="orders")
    await register(operator, "billing/1", domain="billing")
    await register(operator, "billing/2", domain="billing")
    one, two = await api.as_role(Role.AGENT, "agent-1"), await api.as_role(Role.AGENT, "agent-2")
    by_domain = (await one.post("/units/claim", json={"domain": "billing"})).json()
    assert by_domain["unit"]["external_ref"] == "billing/1"
    named = await two.post("/units/billing/2/claim", json={"lease_seconds": 120})
    assert (named.status_code, named.json()["unit"]["external_ref"]) == (200, "billing/2")
    assert set(named.json()) == {"unit", "attempt"}


async def test_claim_with_nothing_claimable_is_empty(api: Api) -> None:
    """No claimable unit: unit and attempt are null, not an error."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    response = await agent.post("/units/claim", json={})
    assert response.json() == {"unit": None, "attempt": None, "resumed": False}


async def test_list_units_pages_with_keyset_cursor(api: Api, operator: httpx.AsyncClient) -> None:
    """GET /units pages oldest first; filters apply."""
    await register(operator, *[f"u{i}" for i in range(5)])
    first = (await operator.get("/units", params={"limit": 3})).json()
    rest = (
        await operator.get("/units", params={"limit": 3, "cursor": first["next_cursor"]})
    ).json()
    assert [u["external_ref"] for u in first["items"] + rest["items"]] == [
        f"u{i}" for i in range(5)
    ]
    assert rest["next_cursor"] is None
    ready = (await operator.get("/units", params={"state": "ready", "fleet": "fleet-a"})).json()
    assert len(ready["items"]) == 5
    events = (await operator.get("/events", params={"limit": 2})).json()
    older = (
        await operator.get("/events", params={"limit": 10, "cursor": events["next_cursor"]})
    ).json()
    assert len(events["items"]) + len(older["items"]) == 5
