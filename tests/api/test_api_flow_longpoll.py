"""Long-poll and the flow controls (DESIGN §13): a parked claimer is woken by resuming a
scope, raising its cap, a slot freed in a capped scope, or a key given back; never by its
timeout (the notifier's periodic look is turned off, as in test_api_longpoll.py)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from support.api_support import Api, claimed, register, until
from work_ledger.api import longpoll
from work_ledger.service.tokens import Role

WAIT = 20  # a woken waiter never runs out in a passing test


@pytest.fixture(autouse=True)
def only_notifications_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(longpoll, "FALLBACK_SECONDS", 600.0)


async def _timed(coro: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await coro  # type: ignore[misc]
    return response, time.monotonic() - started


def _waiters(api: Api, domain: str | None) -> int:
    notifier: longpoll.Notifier = api.app.state.notifier
    return len(notifier.claims(domain))


async def _controls(operator: httpx.AsyncClient, **body: object) -> None:
    response = await operator.post("/controls", json={"reason": "test", **body})
    assert response.status_code == 200, response.text


async def _park(api: Api, agent: httpx.AsyncClient) -> asyncio.Task[tuple[httpx.Response, float]]:
    body = {"wait_seconds": WAIT, "domain": "orders"}
    waiting = asyncio.create_task(_timed(agent.post("/units/claim", json=body)))
    await until(lambda: _waiters(api, "orders") == 1)
    return waiting


async def _woken_with(waiting: asyncio.Task[tuple[httpx.Response, float]], ref: str) -> None:
    response, elapsed = await waiting
    assert response.json()["unit"]["external_ref"] == ref, response.text
    assert elapsed < WAIT


async def test_resuming_a_fleet_wakes_a_domain_waiter(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await register(operator, "p-1", domain="orders")
    await _controls(operator, fleet="fleet-a", paused=True)
    waiting = await _park(api, await api.as_role(Role.AGENT, "agent-1"))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await _controls(operator, fleet="fleet-a", paused=False)
    await _woken_with(waiting, "p-1")


async def test_raising_a_cap_wakes_a_waiter(api: Api, operator: httpx.AsyncClient) -> None:
    await register(operator, "c-1", "c-2", domain="orders")
    await _controls(operator, fleet="fleet-a", domain="orders", max_live=1)
    await claimed(await api.as_role(Role.AGENT, "agent-1"))
    waiting = await _park(api, await api.as_role(Role.AGENT, "agent-2"))
    await _controls(operator, fleet="fleet-a", domain="orders", max_live=2)
    await _woken_with(waiting, "c-2")


async def test_a_slot_freed_in_a_capped_scope_wakes_a_waiter(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await register(operator, "s-1", "s-2", domain="orders")
    await _controls(operator, fleet="fleet-a", max_live=1)
    holder = await api.as_role(Role.AGENT, "agent-1")
    unit, attempt = await claimed(holder, start=True)
    waiting = await _park(api, await api.as_role(Role.AGENT, "agent-2"))
    verified = await holder.post(
        f"/units/{unit}/transition",
        json={"to": "verified", "attempt_id": attempt, "evidence_url": "https://ci.example/1"},
    )
    assert verified.status_code == 200, verified.text
    await _woken_with(waiting, "s-2")


async def test_a_key_given_back_wakes_a_waiter(api: Api, operator: httpx.AsyncClient) -> None:
    units = [
        {"external_ref": "k-1", "fleet": "fleet-a", "domain": "orders", "exclusive": ["mod"]},
        {"external_ref": "k-2", "fleet": "fleet-a", "domain": "orders", "exclusive": ["mod"]},
    ]
    assert (await operator.post("/units", json={"units": units})).status_code == 200
    holder = await api.as_role(Role.AGENT, "agent-1")
    unit, attempt = await claimed(holder, start=True)
    waiting = await _park(api, await api.as_role(Role.AGENT, "agent-2"))
    verified = await holder.post(
        f"/units/{unit}/transition",
        json={"to": "verified", "attempt_id": attempt, "evidence_url": "https://ci.example/1"},
    )
    assert verified.status_code == 200, verified.text
    await _woken_with(waiting, "k-2")
