"""Long-poll: a parked waiter is woken by the notification, not by its timeout.

Every test waits until its waiters are parked (queued in the server's notifier) before it
makes the unit or the answer they wait for, and turns off the notifier's periodic look
(meant for lapsed leases, which send no notification): a waiter answered before its
deadline was woken by the notification and nothing else.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from support.api_support import Api, claimed, register, until
from work_ledger.api import longpoll
from work_ledger.service.tokens import Role

WAIT = 20  # wait_seconds of a waiter that must be woken; it never runs out in a passing test


@pytest.fixture(autouse=True)
def only_notifications_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(longpoll, "FALLBACK_SECONDS", 600.0)


async def _timed(coro: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await coro  # type: ignore[misc]
    return response, time.monotonic() - started


def claim_waiters(api: Api, domain: str | None = None) -> int:
    """Claimers queued for a wake-up (each queues before its first look)."""
    notifier: longpoll.Notifier = api.app.state.notifier
    return len(notifier.claims(domain))


def parked_claims(api: Api) -> int:
    """Claimers past their look and parked on their turn (`asyncio.shield` waits on it)."""
    queue = api.app.state.notifier.claims(None)
    return sum(1 for turn in queue._waiting if turn._callbacks)  # asyncio.Future's own list


def parked_on(event: asyncio.Event) -> int:
    return len(event._waiters)  # type: ignore[attr-defined]  # asyncio.Event's own queue


async def test_claim_wait_wakes_when_a_unit_is_registered(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A parked claim gets the unit registered after it parked, before its wait runs out."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    waiting = asyncio.create_task(_timed(agent.post("/units/claim", json={"wait_seconds": WAIT})))
    await until(lambda: claim_waiters(api) == 1)
    await register(operator, "late")
    response, elapsed = await waiting
    assert response.json()["unit"]["external_ref"] == "late"
    assert elapsed < WAIT


async def test_claim_wait_wakes_when_a_unit_is_released(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A released unit wakes a parked claimer of the same domain."""
    await register(operator, "a", domain="orders")
    holder, waiter = (
        await api.as_role(Role.AGENT, "agent-1"),
        await api.as_role(Role.AGENT, "agent-2"),
    )
    unit, _ = await claimed(holder)
    body = {"wait_seconds": WAIT, "domain": "orders"}
    waiting = asyncio.create_task(_timed(waiter.post("/units/claim", json=body)))
    await until(lambda: claim_waiters(api, "orders") == 1)
    await holder.post(f"/units/{unit}/transition", json={"to": "ready", "outcome": "failed"})
    response, elapsed = await waiting
    assert (response.json()["unit"]["id"], response.json()["attempt"]["attempt_no"]) == (unit, 2)
    assert elapsed < WAIT


async def _race(
    api: Api, operator: httpx.AsyncClient, waiters: int, units: int
) -> tuple[list[float], list[float]]:
    """`waiters` parked claimers, then `units` registered at once: (won, lost) seconds."""
    token = await api.token(Role.AGENT, "fleet")
    clients = [api.client(token, **{"X-WL-Agent": f"fleet/{i}"}) for i in range(waiters)]
    waiting = [
        asyncio.create_task(_timed(c.post("/units/claim", json={"wait_seconds": 5})))
        for c in clients
    ]
    await until(lambda: claim_waiters(api) == waiters)
    await register(operator, *[f"u{i:02d}" for i in range(units)])
    results = await asyncio.gather(*waiting)
    won = sorted(e for r, e in results if r.json()["unit"] is not None)
    lost = sorted(e for r, e in results if r.json()["unit"] is None)
    return won, lost


async def test_many_waiters_share_few_units(api: Api, operator: httpx.AsyncClient) -> None:
    """Ten parked waiters, three units: three win before any loser's wait runs out."""
    won, lost = await _race(api, operator, waiters=10, units=3)
    assert (len(won), len(lost)) == (3, 7)
    assert won[-1] < lost[0]
    assert lost[0] >= 4.9


async def test_wake_ups_pass_on_until_every_new_unit_is_claimed(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Twenty parked waiters, twelve units (more than one wake-up batch): twelve win, each
    before any loser's wait runs out."""
    assert longpoll.CLAIM_WAKE_BATCH < 12
    won, lost = await _race(api, operator, waiters=20, units=12)
    assert (len(won), len(lost)) == (12, 8)
    assert won[-1] < lost[0]


async def test_claim_wait_times_out_empty(api: Api) -> None:
    """Nothing claimable within wait_seconds: an empty answer, not before that long."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    response, elapsed = await _timed(agent.post("/units/claim", json={"wait_seconds": 1}))
    assert response.json()["unit"] is None
    assert 0.9 <= elapsed < 10


async def test_question_wait_wakes_when_answered(api: Api, operator: httpx.AsyncClient) -> None:
    """GET /questions/{id}?wait_seconds, parked, returns the answer given after it parked."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    question = (await agent.post(f"/units/{unit}/block", json={"question": "q"})).json()["question"]
    url = f"/questions/{question['id']}"
    waiting = asyncio.create_task(_timed(agent.get(url, params={"wait_seconds": WAIT})))
    watched = api.app.state.notifier._question
    await until(lambda: question["id"] in watched and parked_on(watched[question["id"]][0]) == 1)
    await triage.post(f"/units/{unit}/unblock", json={"answer": "go ahead"})
    response, elapsed = await waiting
    assert (response.json()["status"], response.json()["answer"]) == ("answered", "go ahead")
    assert elapsed < WAIT


async def test_question_list_wait_wakes_when_one_opens(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Triage parked on an empty open-question list wakes when an agent blocks."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    params = {"status": "open", "wait_seconds": WAIT}
    waiting = asyncio.create_task(_timed(triage.get("/questions", params=params)))
    notifier: longpoll.Notifier = api.app.state.notifier
    await until(lambda: parked_on(notifier.questions_changed()) == 1)
    await agent.post(f"/units/{unit}/block", json={"question": "which schema?"})
    response, elapsed = await waiting
    assert [q["question"] for q in response.json()["items"]] == ["which schema?"]
    assert elapsed < WAIT


async def test_waiters_hold_no_database_connection(api: Api, operator: httpx.AsyncClient) -> None:
    """Twenty parked waiters leave every pooled connection idle, and a read is served while
    they wait."""
    token = await api.token(Role.AGENT, "fleet")
    waiting = [
        asyncio.create_task(
            api.client(token, **{"X-WL-Agent": f"fleet/{i}"}).post(
                "/units/claim", json={"wait_seconds": WAIT}
            )
        )
        for i in range(20)
    ]
    pool = api.app.state.ledger.store.pool
    # A waiter holding a connection would keep it busy (the pool has 8) for as long as it
    # is queued, so this never comes true.
    await until(lambda: claim_waiters(api) == 20 and pool.get_size() == pool.get_idle_size())
    response = await operator.get("/units")
    assert (response.status_code, claim_waiters(api)) == (200, 20)
    await register(operator, *[f"u{i:02d}" for i in range(20)])
    answers = [(await w).json() for w in waiting]
    assert sum(a["unit"] is not None for a in answers) == 20


async def test_departed_waiter_claims_nothing(api: Api, operator: httpx.AsyncClient) -> None:
    """A claimer that hung up while parked, once the server saw it go, does not get a unit
    claimed on its behalf."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    waiting = asyncio.create_task(agent.post("/units/claim", json={"wait_seconds": WAIT}))
    # Parked, not only queued: queued comes just before the first look, which would find
    # the unit registered below if it ran after it.
    await until(lambda: parked_claims(api) == 1)
    # The waiter's own connection: counting all of them would also count an idle
    # keep-alive connection that the server closes on its own timer meanwhile.
    parked = api.connections(mid_request=True)
    assert len(parked) == 1
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await until(lambda: parked.isdisjoint(api.connections()))  # the server saw it go
    await register(operator, "a")
    await until(lambda: claim_waiters(api) == 0)  # woken, it looked and left
    assert (await operator.get("/units/a")).json()["state"] == "ready"
