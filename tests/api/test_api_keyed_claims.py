"""Keyed claims: the reservation lives and dies with the transaction that claims, no timer."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from support.api_support import Api, register
from work_ledger.api.longpoll import Notifier
from work_ledger.service.tokens import Role

# This test's database only: under xdist the other workers' tests run on the same server,
# and their serves name themselves 'work-ledger' too.
WAITING_ON_A_LOCK = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND application_name = 'work-ledger' AND wait_event_type = 'Lock' ORDER BY query_start"
)


async def _until(check: object, what: str, within: float = 30.0) -> None:
    """Poll `check()` until it is true (the order of events, not a sleep and a hope)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():  # type: ignore[operator]
        assert loop.time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def _claimed_events(raw: asyncpg.Connection) -> int:
    count: int = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed'"
    )
    return count


async def test_long_poll_duplicates_under_one_key_claim_once(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """Two waiting copies of one keyed claim: one unit claimed, the same answer twice."""
    token = await api.token(Role.AGENT, "agent-1")
    copies = [api.client(token) for _ in range(2)]
    key = {"Idempotency-Key": "wait-once"}
    waiting = [
        asyncio.create_task(c.post("/units/claim", json={"wait_seconds": 30}, headers=key))
        for c in copies
    ]
    notifier: Notifier = api.app.state.notifier

    async def both_parked() -> bool:
        return len(notifier.claims(None)) == 2

    await _until(both_parked, "both copies parked")
    await register(operator, "a", "b")
    first, second = await asyncio.gather(*waiting)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.content == second.content
    replayed = [r.headers.get("Idempotent-Replayed") for r in (first, second)]
    assert sorted(map(str, replayed)) == ["None", "true"]
    assert await _claimed_events(raw) == 1


async def test_long_poll_holds_no_reservation_while_it_waits(
    api: Api, raw: asyncpg.Connection
) -> None:
    """A parked keyed claim holds no key row and no transaction; its empty answer is kept."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    key = {"Idempotency-Key": "wait-empty"}
    waiting = asyncio.create_task(agent.post("/units/claim", json={"wait_seconds": 5}, headers=key))
    notifier: Notifier = api.app.state.notifier

    async def parked_holding_nothing() -> bool:
        # Queued in the notifier comes just before each look; the look's transaction ends
        # right after it: poll for both, and fail if the wait ran out before they held.
        assert not waiting.done(), "the claim answered before it was seen waiting idle"
        if len(notifier.claims(None)) != 1:
            return False
        keys = await raw.fetchval("SELECT count(*) FROM wl_idempotency_keys")
        in_tx = await raw.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'work-ledger' AND state LIKE 'idle in transaction%'"
        )
        return bool(keys == 0 and in_tx == 0)

    await _until(parked_holding_nothing, "the claim parked, holding no key and no transaction")
    empty = await waiting
    assert (empty.status_code, empty.json()["unit"]) == (200, None)
    again = await agent.post("/units/claim", json={"wait_seconds": 5}, headers=key)
    assert (again.headers["Idempotent-Replayed"], again.content) == ("true", empty.content)


async def test_keyed_claim_whose_connection_dies_frees_its_key_at_once(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """A claim's connection killed mid-claim: its 503; a duplicate waiting on the key runs."""
    await register(operator, "a")
    token = await api.token(Role.AGENT, "agent-1")
    first_client, second_client = api.client(token), api.client(token)
    key = {"Idempotency-Key": "cut-off"}
    async with raw.transaction():
        # Claims insert an attempt: holding this lock stops one after it reserved its key.
        await raw.execute("LOCK TABLE work_unit_attempts IN EXCLUSIVE MODE")
        first = asyncio.create_task(first_client.post("/units/claim", json={}, headers=key))

        async def blocked(count: int) -> bool:
            return len(await raw.fetch(WAITING_ON_A_LOCK)) == count

        await _until(lambda: blocked(1), "the first claim waiting on the table lock")
        [cut] = await raw.fetch(WAITING_ON_A_LOCK)
        second = asyncio.create_task(second_client.post("/units/claim", json={}, headers=key))
        await _until(lambda: blocked(2), "the duplicate waiting on the first one's key")
        await raw.execute("SELECT pg_terminate_backend($1)", cut["pid"])
        assert (await first).status_code == 503
        await _until(lambda: blocked(1), "the duplicate freed, now claiming")
    answered = await second
    assert answered.status_code == 200
    assert "Idempotent-Replayed" not in answered.headers
    assert answered.json()["unit"]["external_ref"] == "a"
    again = await first_client.post("/units/claim", json={}, headers=key)
    assert (again.headers["Idempotent-Replayed"], again.content) == ("true", answered.content)
    assert await _claimed_events(raw) == 1
