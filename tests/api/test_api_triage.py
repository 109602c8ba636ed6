"""POST /questions/{id}/route and GET /questions?routed=: triage's loop over HTTP."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest

from support.api_support import Api, assert_problem, assert_refused, claimed, register
from work_ledger.service.tokens import Role

ROUNDS = 5


@pytest.fixture
async def triage(api: Api) -> httpx.AsyncClient:
    return await api.as_role(Role.TRIAGE, "triage-1")


async def _ask(
    api: Api, operator: httpx.AsyncClient, text: str = "which schema?"
) -> dict[str, Any]:
    """A fresh unit, claimed, started and blocked on `text`: its open question."""
    ref = f"u-{uuid.uuid4().hex[:8]}"
    await register(operator, ref)
    agent = await api.as_role(Role.AGENT, f"agent-{ref}")
    await claimed(agent, start=True)
    response = await agent.post(f"/units/{ref}/block", json={"question": text})
    assert response.status_code == 201, response.text
    question: dict[str, Any] = response.json()["question"]
    return question


async def _route(
    client: httpx.AsyncClient, question: dict[str, Any], external: str, **kw: Any
) -> httpx.Response:
    return await client.post(
        f"/questions/{question['id']}/route", json={"external_task_id": external}, **kw
    )


async def _routed_as(client: httpx.AsyncClient, question: dict[str, Any]) -> str | None:
    stored: str | None = (await client.get(f"/questions/{question['id']}")).json()[
        "external_task_id"
    ]
    return stored


async def test_route_records_the_id_once_and_names_it_on_conflict(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """200 with the id; the same id again 200, unchanged; another id a 409 naming the first."""
    question = await _ask(api, operator)
    first = await _route(triage, question, "HQ-1")
    assert (first.status_code, first.json()["external_task_id"]) == (200, "HQ-1")
    again = await _route(triage, question, "HQ-1")
    assert again.json() == first.json()
    body = assert_refused(await _route(triage, question, "HQ-2"), "question_routed_once")
    assert body["external_task_id"] == "HQ-1"
    assert "HQ-1" in body["detail"]
    events = (await triage.get(f"/units/{question['unit_id']}/events")).json()["items"]
    routed = [e for e in events if e["event_type"] == "routed"]
    assert [(e["agent_id"], e["detail"]["external_task_id"]) for e in routed] == [
        ("triage-1", "HQ-1")
    ]


async def test_route_is_for_triage_and_operator_only(api: Api, operator: httpx.AsyncClient) -> None:
    """agent, harness, projector and reader tokens get a 403; triage and operator route."""
    question = await _ask(api, operator)
    for role in (Role.AGENT, Role.HARNESS, Role.PROJECTOR, Role.READER):
        client = await api.as_role(role)
        assert_problem(await _route(client, question, "HQ-1"), 403, "forbidden")
    assert (await _route(operator, question, "HQ-1")).status_code == 200


async def test_route_refuses_a_closed_question(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """Answered before routing: a 409 question_routed_while_open, nothing written."""
    question = await _ask(api, operator)
    await triage.post(f"/units/{question['unit_id']}/unblock", json={"answer": "v2"})
    body = assert_refused(await _route(triage, question, "HQ-1"), "question_routed_while_open")
    assert body["question_status"] == "answered"
    assert await _routed_as(triage, question) is None


async def test_route_bad_input_is_a_4xx_and_writes_nothing(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """Empty, overlong or extra fields: 422; an unknown question: 404; the question unrouted."""
    question = await _ask(api, operator)
    url = f"/questions/{question['id']}/route"
    for body in (
        {"external_task_id": ""},
        {"external_task_id": "x" * 257},
        {},
        {"external_task_id": "a", "x": 1},
    ):
        assert_problem(await triage.post(url, json=body), 422)
    assert_problem(await _route(triage, {"id": uuid.uuid4()}, "HQ-1"), 404, "not_found")
    assert_problem(await _route(triage, {"id": "not-a-uuid"}, "HQ-1"), 422)
    assert await _routed_as(triage, question) is None


async def test_route_with_an_idempotency_key_replays(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """A retried key replays the first outcome; the key with another id is a 422."""
    question = await _ask(api, operator)
    headers = {"Idempotency-Key": "route-1"}
    first = await _route(triage, question, "HQ-1", headers=headers)
    replay = await _route(triage, question, "HQ-1", headers=headers)
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert (replay.status_code, replay.json()) == (first.status_code, first.json())
    assert_problem(await _route(triage, question, "HQ-2", headers=headers), 422)
    events = (await triage.get(f"/units/{question['unit_id']}/events")).json()["items"]
    assert [e["event_type"] for e in events].count("routed") == 1


async def test_list_questions_routed_filter(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """routed=false lists the questions triage still has to route, routed=true the others."""
    routed, unrouted = await _ask(api, operator, "a?"), await _ask(api, operator, "b?")
    await _route(triage, routed, "HQ-1")

    async def listed(flag: str) -> list[str]:
        response = await triage.get("/questions", params={"status": "open", "routed": flag})
        return [q["id"] for q in response.json()["items"]]

    assert await listed("false") == [unrouted["id"]]
    assert await listed("true") == [routed["id"]]


async def _timed(coro: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await coro
    return response, time.monotonic() - started


async def _waiting(
    triage: httpx.AsyncClient, routed: str
) -> asyncio.Task[tuple[httpx.Response, float]]:
    """A long-poll of the open questions (up to 30 s), checked to be waiting."""
    params = {"status": "open", "routed": routed, "wait_seconds": 30}
    waiting = asyncio.create_task(_timed(triage.get("/questions", params=params)))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    return waiting


async def test_unrouted_long_poll_wakes_for_a_new_question_only(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """A routed question does not end the wait; the next question asked does, alone."""
    await _route(triage, await _ask(api, operator, "old?"), "HQ-1")
    waiting = await _waiting(triage, routed="false")
    await _ask(api, operator, "new?")
    response, elapsed = await waiting
    assert [q["question"] for q in response.json()["items"]] == ["new?"]
    assert elapsed < 20  # woken by the question, not by the 30 s timeout


async def test_routed_long_poll_wakes_when_a_question_is_routed(
    api: Api, operator: httpx.AsyncClient, triage: httpx.AsyncClient
) -> None:
    """Routing notifies list waiters as an opened question does."""
    question = await _ask(api, operator)
    waiting = await _waiting(triage, routed="true")
    await _route(triage, question, "HQ-1")
    response, elapsed = await waiting
    assert [q["external_task_id"] for q in response.json()["items"]] == ["HQ-1"]
    assert elapsed < 20


async def test_two_triage_workers_race_to_route_exactly_one_wins(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Two triage workers, each its own token and connection, route one question at once."""
    workers = [await api.as_role(Role.TRIAGE, f"triage-{i}") for i in range(2)]
    for _ in range(ROUNDS):
        question = await _ask(api, operator)
        responses = await asyncio.gather(
            *(_route(w, question, f"HQ-{i}") for i, w in enumerate(workers))
        )
        assert sorted(r.status_code for r in responses) == [200, 409]
        winner = next(r for r in responses if r.status_code == 200).json()["external_task_id"]
        loser = next(r for r in responses if r.status_code == 409).json()
        assert loser["external_task_id"] == winner
