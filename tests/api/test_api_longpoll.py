"""Long-poll: waiters return as soon as the event happens, not at the timeout."""

from __future__ import annotations

import asyncio
import time

import httpx
from api_support import Api, claimed, register

from work_ledger.auth import Role


async def _timed(coro: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await coro  # type: ignore[misc]
    return response, time.monotonic() - started


async def test_claim_wait_wakes_when_a_unit_is_registered(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A claim waiting 20 s returns within a second of the registration."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    waiting = asyncio.create_task(_timed(agent.post("/units/claim", json={"wait_seconds": 20})))
    await asyncio.sleep(0.3)
    await register(operator, "late")
    response, elapsed = await waiting
    assert response.json()["unit"]["external_ref"] == "late"
    assert elapsed < 1.5


async def test_claim_wait_wakes_when_a_unit_is_released(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A released unit wakes a waiting claimer of the same domain."""
    await register(operator, "a", domain="orders")
    holder, waiter = (
        await api.as_role(Role.AGENT, "agent-1"),
        await api.as_role(Role.AGENT, "agent-2"),
    )
    unit, _ = await claimed(holder)
    body = {"wait_seconds": 20, "domain": "orders"}
    waiting = asyncio.create_task(_timed(waiter.post("/units/claim", json=body)))
    await asyncio.sleep(0.3)
    await holder.post(f"/units/{unit}/transition", json={"to": "ready", "outcome": "failed"})
    response, elapsed = await waiting
    assert (response.json()["unit"]["id"], response.json()["attempt"]["attempt_no"]) == (unit, 2)
    assert elapsed < 1.5


async def test_many_waiters_share_few_units(api: Api, operator: httpx.AsyncClient) -> None:
    """Ten waiters, three units registered: three win at once, the rest time out empty."""
    token = await api.token(Role.AGENT, "fleet")
    clients = [api.client(token, **{"X-WL-Agent": f"fleet/{i}"}) for i in range(10)]
    waiting = [
        asyncio.create_task(_timed(c.post("/units/claim", json={"wait_seconds": 2})))
        for c in clients
    ]
    await asyncio.sleep(0.3)
    await register(operator, "a", "b", "c")
    results = await asyncio.gather(*waiting)
    won = [e for r, e in results if r.json()["unit"] is not None]
    lost = [e for r, e in results if r.json()["unit"] is None]
    assert (len(won), len(lost)) == (3, 7)
    assert max(won) < 1.5
    assert min(lost) >= 1.9


async def test_wake_ups_pass_on_until_every_new_unit_is_claimed(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Twenty waiters, twelve units at once (more than one wake-up batch): twelve win fast."""
    token = await api.token(Role.AGENT, "fleet")
    clients = [api.client(token, **{"X-WL-Agent": f"fleet/{i}"}) for i in range(20)]
    waiting = [
        asyncio.create_task(_timed(c.post("/units/claim", json={"wait_seconds": 2})))
        for c in clients
    ]
    await asyncio.sleep(0.3)
    await register(operator, *[f"u{i:02d}" for i in range(12)])
    results = await asyncio.gather(*waiting)
    won = sorted(e for r, e in results if r.json()["unit"] is not None)
    assert len(won) == 12
    assert won[-1] < 1.5


async def test_claim_wait_times_out_empty(api: Api) -> None:
    """Nothing claimable within wait_seconds: an empty answer after about that long."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    response, elapsed = await _timed(agent.post("/units/claim", json={"wait_seconds": 1}))
    assert response.json()["unit"] is None
    assert 0.9 <= elapsed < 2.5


async def test_question_wait_wakes_when_answered(api: Api, operator: httpx.AsyncClient) -> None:
    """GET /questions/{id}?wait_seconds returns within a second of the answer."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    question = (await agent.post(f"/units/{unit}/block", json={"question": "q"})).json()["question"]
    url = f"/questions/{question['id']}"
    waiting = asyncio.create_task(_timed(agent.get(url, params={"wait_seconds": 20})))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await triage.post(f"/units/{unit}/unblock", json={"answer": "go ahead"})
    response, elapsed = await waiting
    assert (response.json()["status"], response.json()["answer"]) == ("answered", "go ahead")
    assert elapsed < 1.5


async def test_question_list_wait_wakes_when_one_opens(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Triage waiting on an empty open-question list wakes when an agent blocks."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    params = {"status": "open", "wait_seconds": 20}
    waiting = asyncio.create_task(_timed(triage.get("/questions", params=params)))
    await asyncio.sleep(0.3)
    await agent.post(f"/units/{unit}/block", json={"question": "which schema?"})
    response, elapsed = await waiting
    assert [q["question"] for q in response.json()["items"]] == ["which schema?"]
    assert elapsed < 1.5


async def test_waiters_hold_no_database_connection(api: Api, operator: httpx.AsyncClient) -> None:
    """Twenty parked waiters leave the pool free for other requests."""
    token = await api.token(Role.AGENT, "fleet")
    waiting = [
        asyncio.create_task(
            api.client(token, **{"X-WL-Agent": f"fleet/{i}"}).post(
                "/units/claim", json={"wait_seconds": 2}
            )
        )
        for i in range(20)
    ]
    await asyncio.sleep(0.5)
    pool = api.app.state.ledger.store.pool
    assert pool.get_size() - pool.get_idle_size() == 0
    response, elapsed = await _timed(operator.get("/units"))
    assert (response.status_code, elapsed < 0.5) == (200, True)
    await register(operator, "a")
    answers = [(await w).json() for w in waiting]
    assert sum(a["unit"] is not None for a in answers) == 1


async def test_departed_waiter_claims_nothing(api: Api, operator: httpx.AsyncClient) -> None:
    """A claimer that hung up while waiting does not get a unit claimed on its behalf."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    waiting = asyncio.create_task(agent.post("/units/claim", json={"wait_seconds": 20}))
    await asyncio.sleep(0.3)
    waiting.cancel()
    await asyncio.sleep(0.3)
    await register(operator, "a")
    await asyncio.sleep(0.5)
    assert (await operator.get("/units/a")).json()["state"] == "ready"
