"""DESIGN §12 over HTTP: the attempt limit, budgets, and cost by model and tokens."""

from __future__ import annotations

import asyncio

import httpx

from support.api_support import Api, assert_problem, assert_refused, claimed
from work_ledger.service.tokens import Role


async def _release(agent: httpx.AsyncClient, unit_id: str, attempt_id: str, why: str) -> dict:
    released = await agent.post(
        f"/units/{unit_id}/transition",
        json={"to": "ready", "outcome": "failed", "reason": why, "attempt_id": attempt_id},
    )
    assert released.status_code == 200, released.text
    body: dict = released.json()
    return body


async def test_release_at_the_limit_parks_the_unit_with_a_question(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """The last allowed failure parks the unit; the answer allows max_attempts more."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    registered = await operator.post(
        "/units", json={"units": [{"external_ref": "poison", "fleet": "f", "max_attempts": 2}]}
    )
    assert registered.status_code == 200, registered.text
    unit_id, attempt_id = await claimed(agent)
    first = await _release(agent, unit_id, attempt_id, "segfault in the parser")
    assert first["unit"]["state"] == "ready"
    unit_id, attempt_id = await claimed(agent)
    parked = await _release(agent, unit_id, attempt_id, "segfault again")
    assert parked["unit"]["state"] == "waiting"
    shown = (await agent.get("/units/poison")).json()
    assert (shown["max_attempts"], shown["failed_attempts"], shown["attempts_allowed"]) == (2, 2, 2)
    [question] = shown["questions"]
    assert (question["asked_by"], question["assignee_group_slug"], question["status"]) == (
        "work-ledger",
        "agent-questions",
        "open",
    )
    assert "failed 2 of its 2 allowed attempts" in question["question"]
    assert "segfault again" in question["question"]
    assert "segfault in the parser" in question["question"]
    assert shown["waiting_on"] == [{"kind": "answer", "question_id": question["id"]}]
    events = (await agent.get("/units/poison/events")).json()["items"]
    assert (events[0]["event_type"], events[0]["to_state"]) == ("released", "waiting")
    assert (await agent.post("/units/claim", json={})).json()["unit"] is None
    refused = await agent.post("/units/poison/claim", json={})
    assert_refused(refused, "attempt_limit_reached")
    answered = await triage.post("/units/poison/unblock", json={"answer": "try once more"})
    assert (answered.status_code, answered.json()["unit"]["state"]) == (200, "ready")
    shown = (await agent.get("/units/poison")).json()
    assert (shown["attempts_allowed"], shown["failed_attempts"]) == (4, 2)
    events = (await agent.get("/units/poison/events")).json()["items"]
    assert (events[0]["event_type"], events[0]["from_state"], events[0]["to_state"]) == (
        "unblocked",
        "waiting",
        "ready",
    )


async def test_claim_parks_a_lapsed_unit_at_its_limit_and_goes_on(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A lapsed lease on the last allowed attempt: the claim parks it and claims the next;
    a named claim parks it and answers 409 attempt_limit_reached; disposing it ends it."""
    dead = await api.as_role(Role.AGENT, "dead-agent")
    other = await api.as_role(Role.AGENT, "other-agent")
    units = [
        {"external_ref": "lapsing", "fleet": "f", "max_attempts": 1},
        {"external_ref": "next", "fleet": "f"},
        {"external_ref": "named", "fleet": "f", "max_attempts": 1},
    ]
    await operator.post("/units", json={"units": units})
    lapsing_id, _ = await claimed(dead, lease_seconds=1)
    third = await api.as_role(Role.AGENT, "third-agent")
    held = await third.post("/units/named/claim", json={"lease_seconds": 1})
    named_id = held.json()["unit"]["id"]
    await asyncio.sleep(1.2)
    fourth = await api.as_role(Role.AGENT, "fourth-agent")
    refused = await fourth.post(f"/units/{named_id}/claim", json={})
    body = assert_refused(refused, "attempt_limit_reached")
    assert body["code"] == "attempt_limit_reached"
    assert (await fourth.get(f"/units/{named_id}")).json()["state"] == "waiting"
    claim = (await other.post("/units/claim", json={})).json()
    assert claim["unit"]["external_ref"] == "next"
    lapsing = (await other.get(f"/units/{lapsing_id}")).json()
    assert (lapsing["state"], lapsing["attempts"][0]["outcome"]) == ("waiting", "superseded")
    events = (await other.get(f"/units/{lapsing_id}/events")).json()["items"]
    assert (events[0]["event_type"], events[0]["to_state"]) == ("stale_reclaimed", "waiting")
    disposed = await operator.post(f"/units/{lapsing_id}/dispose", json={"disposition": "DEAD"})
    assert disposed.json()["unit"]["state"] == "abandoned"
    shown = (await operator.get(f"/units/{lapsing_id}")).json()
    assert shown["questions"][0]["status"] == "cancelled"


async def test_budget_stops_new_claims_and_lets_held_work_go_on(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """At spent >= cap: pull-next skips the scope, a named claim is 409 budget_exhausted;
    the holder's cost is still recorded; raising the cap makes it claimable again."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    other = await api.as_role(Role.AGENT, "agent-2")
    units = [{"external_ref": f"u{i}", "fleet": "f", "domain": "d"} for i in range(3)]
    await operator.post("/units", json={"units": units})
    set_ = await operator.post("/budgets", json={"fleet": "f", "domain": "d", "cap_cents": 100})
    assert set_.json() == {
        "fleet": "f",
        "domain": "d",
        "cap_cents": 100,
        "spent_cents": 0,
        "remaining_cents": 100,
    }
    unit_id, attempt_id = await claimed(agent, start=True)
    spent = await agent.post(f"/attempts/{attempt_id}/cost", json={"cost_cents": 100})
    assert spent.status_code == 200
    assert (await other.post("/units/claim", json={})).json()["unit"] is None
    refused = await other.post("/units/u1/claim", json={})
    body = assert_refused(refused, "budget_exhausted")
    assert (body["fleet"], body["domain"], body["cap_cents"], body["spent_cents"]) == (
        "f",
        "d",
        100,
        100,
    )
    again = await agent.post(f"/attempts/{attempt_id}/cost", json={"cost_cents": 30})
    assert again.json()["unit"]["cost_cents"] == 130
    resumed = (await agent.post("/units/claim", json={})).json()
    assert (resumed["unit"]["id"], resumed["resumed"]) == (unit_id, True)
    heartbeat = await agent.post(f"/attempts/{attempt_id}/heartbeat", json={})
    assert heartbeat.status_code == 200
    listed = (await operator.get("/budgets")).json()["items"]
    assert listed == [
        {"fleet": "f", "domain": "d", "cap_cents": 100, "spent_cents": 130, "remaining_cents": 0}
    ]
    assert_problem(await agent.get("/budgets"), 403)
    assert (await other.get("/budgets")).status_code == 403
    reader = await api.as_role(Role.READER, "grafana")
    assert (await reader.get("/budgets")).status_code == 200
    waiting = asyncio.create_task(other.post("/units/claim", json={"wait_seconds": 30}))
    await asyncio.sleep(0.3)
    raised = await operator.post("/budgets", json={"fleet": "f", "domain": "d", "cap_cents": 500})
    assert raised.json()["remaining_cents"] == 370
    woken = (await asyncio.wait_for(waiting, 20)).json()
    assert woken["unit"]["external_ref"] == "u1"
    for bad in ({"fleet": "f", "cap_cents": -1}, {"fleet": "f", "cap_cents": "9"}, {"fleet": "f"}):
        assert_problem(await operator.post("/budgets", json=bad), 422)


async def test_cost_records_by_model_and_tokens(api: Api, operator: httpx.AsyncClient) -> None:
    """Each record is kept; the attempt shows its records summed per model."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    await operator.post("/units", json={"units": [{"external_ref": "u", "fleet": "f"}]})
    _, attempt_id = await claimed(agent)
    records = [
        {"cost_cents": 30, "model": "opus", "input_tokens": 1000, "output_tokens": 200},
        {"cost_cents": 12, "model": "opus", "cache_read_tokens": 5000, "estimated": True},
        {"cost_cents": 0, "model": "haiku", "output_tokens": 50},
        {"cost_cents": 7},
    ]
    for record in records:
        answer = await agent.post(f"/attempts/{attempt_id}/cost", json=record)
        assert answer.status_code == 200, answer.text
    assert answer.json()["attempt"]["cost_cents"] == 49
    for bad in (
        {"cost_cents": 0},
        {},
        {"cost_cents": -1},
        {"cost_cents": 5, "input_tokens": -3},
        {"cost_cents": 5, "model": "m" * 129},
        {"cost_cents": 5, "estimated": "yes"},
    ):
        assert_problem(await agent.post(f"/attempts/{attempt_id}/cost", json=bad), 422)
    shown = (await agent.get("/units/u")).json()
    assert shown["cost_cents"] == 49
    assert shown["attempts"][0]["cost_by_model"] == [
        {
            "model": None,
            "cost_cents": 7,
            "estimated_cents": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
        },
        {
            "model": "haiku",
            "cost_cents": 0,
            "estimated_cents": 0,
            "input_tokens": 0,
            "output_tokens": 50,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
        },
        {
            "model": "opus",
            "cost_cents": 42,
            "estimated_cents": 12,
            "input_tokens": 1000,
            "output_tokens": 200,
            "cache_read_tokens": 5000,
            "cache_write_tokens": 0,
        },
    ]
