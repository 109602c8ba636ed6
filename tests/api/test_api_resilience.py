"""The listener survives a lost connection; stale or expired idempotency records do not block."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest

from support.api_support import Api, register, until
from work_ledger.api import longpoll
from work_ledger.service.idempotency import request_hash
from work_ledger.service.tokens import Role


async def test_listener_reconnects_after_its_connection_is_killed(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pg_terminate_backend on the LISTEN connection: it reconnects and wakes waiters again."""
    monkeypatch.setattr(longpoll, "FALLBACK_SECONDS", 600.0)  # only a notification wakes
    notifier = api.app.state.notifier
    killed = await raw.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )
    assert killed == 1
    async with asyncio.timeout(10):
        while notifier.connected.is_set():  # noqa: ASYNC110 (no event marks the loss)
            await asyncio.sleep(0.02)
        await notifier.connected.wait()
    agent = await api.as_role(Role.AGENT, "agent-1")
    started = time.monotonic()
    waiting = asyncio.create_task(agent.post("/units/claim", json={"wait_seconds": 20}))
    await until(lambda: len(notifier.claims(None)) == 1)  # parked before the unit exists
    await register(operator, "a")
    assert (await waiting).json()["unit"]["external_ref"] == "a"
    assert time.monotonic() - started < 20  # woken by the new connection's notification


async def test_stale_reservation_is_taken_over(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """A reservation whose process died long ago does not block the retry."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    digest = request_hash("POST", "/units/claim", "", b"{}")
    await raw.execute(
        "INSERT INTO wl_idempotency_keys (scope, key, request_hash, created_at) "
        "VALUES ('agent:agent-1', 'dead-1', $1, now() - interval '1 hour')",
        digest,
    )
    response = await agent.post("/units/claim", json={}, headers={"Idempotency-Key": "dead-1"})
    assert response.status_code == 200, response.text
    assert "Idempotent-Replayed" not in response.headers  # run, not answered from the record
    assert response.json()["unit"]["external_ref"] == "a"


async def test_expired_records_let_the_key_run_again(api: Api, operator: httpx.AsyncClient) -> None:
    """After expiry a key is forgotten: the same request runs again."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    key = {"Idempotency-Key": "old"}
    unit = (await agent.post("/units/claim", json={}, headers=key)).json()["unit"]["id"]
    await agent.post(f"/units/{unit}/transition", json={"to": "ready"})
    await api.app.state.idempotency.expire(0)
    again = await agent.post("/units/claim", json={}, headers=key)
    assert "Idempotent-Replayed" not in again.headers
    assert again.json()["attempt"]["attempt_no"] == 2
