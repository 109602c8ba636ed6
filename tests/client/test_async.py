"""The asyncio SDK against a real running server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from support.lease_history import HEARTBEAT_FRACTION, LEASE_SECONDS, renewals_in_time, sleep_past
from support.wl_server import LedgerServer
from work_ledger.client import AsyncClient, Client, NothingToClaim
from work_ledger.client._sending import Call
from work_ledger.client.aio_work import AsyncWork
from work_ledger.errors import AttemptSuperseded

EVIDENCE = "https://ci.example/runs/5"


@pytest.fixture
async def async_agent(ledger_server: LedgerServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(ledger_server.url, ledger_server.token("agent", "async-1")) as client:
        yield client


async def test_async_claim_context_drives_unit_to_done(
    operator: Client, async_agent: AsyncClient
) -> None:
    """async with client.claim(): start, cost, verify, dispose MIGRATED."""
    operator.register([{"external_ref": "u1", "fleet": "f", "domain": "orders"}])
    async with async_agent.claim(domain="orders") as work:
        assert work.unit.state == "in_progress"
        await work.cost(40)
        await work.verify(EVIDENCE)
        await work.dispose("MIGRATED")
    detail = await async_agent.get_unit("u1")
    assert (detail.unit.state, detail.unit.cost_cents) == ("done", 40)


async def test_async_heartbeat_keeps_short_lease_alive(
    operator: Client, async_agent: AsyncClient, make_client: Callable[..., Client]
) -> None:
    """A short lease outlives its first expiry while the block awaits: the heartbeat task
    renewed it each time before it ran out (read from the events)."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    rival = make_client("agent", "rival")
    async with async_agent.claim(
        lease_seconds=LEASE_SECONDS, heartbeat_fraction=HEARTBEAT_FRACTION
    ) as work:
        expiry = work.unit.lease_expires_at
        assert expiry is not None
        await asyncio.to_thread(sleep_past, expiry)
        assert (await asyncio.to_thread(rival.claim_next)).unit is None
        await work.verify(EVIDENCE)
    assert renewals_in_time(operator, "u1", expiry) >= 1


async def test_async_exception_releases_unit_failed(
    operator: Client, async_agent: AsyncClient
) -> None:
    """An exception inside `async with` releases the unit with outcome failed."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    with pytest.raises(ValueError, match="bad diff"):
        async with async_agent.claim():
            raise ValueError("bad diff")
    detail = await async_agent.get_unit("u1")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")


async def test_async_claim_empty_raises(async_agent: AsyncClient) -> None:
    """Nothing claimable: NothingToClaim."""
    with pytest.raises(NothingToClaim):
        await async_agent.claim_work()


async def test_a_heartbeat_refused_while_verify_ends_the_attempt_loses_nothing(
    operator: Client, async_agent: AsyncClient
) -> None:
    """A heartbeat sent before verify and answered after verify committed is refused (the
    attempt ended); the work is not lost for it: dispose, the unit's last write, goes on."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    claim = await async_agent.claim_next()
    verified, refused = asyncio.Event(), asyncio.Event()

    class Reordered:
        """The agent's client, answering the heartbeat between verify's commit and answer."""

        timeout = async_agent.timeout

        async def send(self, call: Call[Any]) -> Any:
            if call.path.endswith("/heartbeat"):
                await verified.wait()
                try:
                    return await async_agent.send(call)
                finally:
                    refused.set()
            answer = await async_agent.send(call)
            if (call.json or {}).get("to") == "verified":
                verified.set()
                await refused.wait()
            return answer

    work = AsyncWork(Reordered(), claim)
    await work.start()
    beat = asyncio.create_task(work.heartbeat())
    await work.verify(EVIDENCE)
    with pytest.raises(AttemptSuperseded):
        await beat
    await work.dispose("MIGRATED")
    assert (await async_agent.get_unit("u1")).unit.state == "done"
