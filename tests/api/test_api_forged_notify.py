"""A forged NOTIFY (any role may send one, the reader too) is a hint, never a fact."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx

from support.api_support import Api, claimed, register
from work_ledger.readside.roles import grant_reader
from work_ledger.service.tokens import Role


async def _as_reader(database_url: str, raw: asyncpg.Connection) -> asyncpg.Connection:
    role = f"wl_forger_{uuid.uuid4().hex[:8]}"
    await grant_reader(raw, role, "forger-secret")
    return await asyncpg.connect(database_url, user=role, password="forger-secret")


async def _parked(api: Api, domain: str) -> None:
    """Until a claim waiter of `domain` is parked on the listener (the order, not a sleep)."""
    for _ in range(600):
        if len(api.app.state.notifier.claims(domain)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the claim waiter never parked")


async def test_a_forged_claimable_notify_wakes_a_waiter_that_finds_nothing(
    api: Api, operator: httpx.AsyncClient, database_url: str, raw: asyncpg.Connection
) -> None:
    """The reader NOTIFYs wl_claimable for a held unit's domain: the parked waiter
    re-reads, claims nothing, and the holder keeps its unit."""
    await register(operator, "held", domain="orders")
    holder = await api.as_role(Role.AGENT, "holder")
    unit, attempt = await claimed(holder)
    waiter = await api.as_role(Role.AGENT, "waiter")
    forger = await _as_reader(database_url, raw)
    try:
        waiting = asyncio.create_task(
            waiter.post("/units/claim", json={"wait_seconds": 3, "domain": "orders"})
        )
        await _parked(api, "orders")
        await forger.execute("SELECT pg_notify('wl_claimable', 'orders')")
        await forger.execute(f"NOTIFY wl_claimable, '{unit}'")
        response = await waiting
    finally:
        await forger.close()
    assert response.status_code == 200, response.text
    assert response.json()["unit"] is None
    shown = (await operator.get(f"/units/{unit}")).json()
    assert (shown["claimed_by"], [a["id"] for a in shown["attempts"]]) == ("holder", [attempt])
