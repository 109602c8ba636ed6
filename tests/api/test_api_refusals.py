"""Every refusal path of DESIGN §4 over HTTP: a 409 naming the invariant (or a 403/404)."""

from __future__ import annotations

import asyncio

import httpx

from support.api_support import Api, assert_problem, assert_refused, claimed, register
from work_ledger.service.tokens import Role

VERIFY = {"to": "verified", "evidence_url": "https://ci.example/run/9"}


async def test_named_claim_of_held_unit_names_holder_and_lease(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A live-held unit refuses a named claim with the holder and the lease expiry."""
    await register(operator, "orders/a")
    first, second = (
        await api.as_role(Role.AGENT, "agent-1"),
        await api.as_role(Role.AGENT, "agent-2"),
    )
    await claimed(first)
    body = assert_refused(
        await second.post("/units/orders/a/claim", json={}), "unit_claimed_only_when_claimable"
    )
    assert "held by agent-1" in body["detail"]
    assert "until" in body["detail"]
    assert body["state"] == "claimed"


async def test_named_claim_while_holding_another_is_refused(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """An agent holds one live claim at a time."""
    await register(operator, "a", "b")
    agent = await api.as_role(Role.AGENT, "agent-1")
    await claimed(agent)
    assert_refused(await agent.post("/units/b/claim", json={}), "one_live_claim_per_agent")


async def test_named_claim_of_closed_unit_is_refused(api: Api, operator: httpx.AsyncClient) -> None:
    """A terminal unit cannot be claimed."""
    await register(operator, "a")
    await operator.post("/units/a/dispose", json={"disposition": "DROPPED"})
    agent = await api.as_role(Role.AGENT, "agent-1")
    body = assert_refused(
        await agent.post("/units/a/claim", json={}), "unit_state_transition_allowed"
    )
    assert (body["state"], body["allowed"]) == ("abandoned", [])


async def test_wrong_state_transitions_are_refused(api: Api, operator: httpx.AsyncClient) -> None:
    """verify/block from claimed, start twice, unblock when not blocked: 409 each."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent)
    rule = "unit_state_transition_allowed"
    assert_refused(await agent.post(f"/units/{unit}/transition", json=VERIFY), rule)
    assert_refused(await agent.post(f"/units/{unit}/block", json={"question": "q"}), rule)
    await agent.post(f"/units/{unit}/transition", json={"to": "in_progress"})
    body = assert_refused(
        await agent.post(f"/units/{unit}/transition", json={"to": "in_progress"}), rule
    )
    assert "verify" in body["allowed"]
    assert_refused(await triage.post(f"/units/{unit}/unblock", json={"answer": "x"}), rule)


async def test_dispositions_outside_the_map_are_refused(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """MIGRATED needs verified; DEFERRED needs blocked or ready; closed stays closed."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit, _ = await claimed(agent, start=True)
    rule = "unit_state_transition_allowed"
    assert_refused(
        await agent.post(f"/units/{unit}/dispose", json={"disposition": "MIGRATED"}), rule
    )
    assert_refused(
        await agent.post(f"/units/{unit}/dispose", json={"disposition": "DEFERRED"}), rule
    )
    dropped = await agent.post(f"/units/{unit}/dispose", json={"disposition": "DROPPED"})
    assert dropped.json()["unit"]["state"] == "abandoned"
    assert_refused(
        await operator.post(f"/units/{unit}/dispose", json={"disposition": "DEAD"}), rule
    )


async def test_superseded_attempt_is_fenced_even_for_same_agent(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """After a lapsed lease is reclaimed, writes with the old attempt_id are a stop signal."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    other = await api.as_role(Role.AGENT, "agent-2")
    unit, old = await claimed(agent, lease_seconds=1)
    await asyncio.sleep(1.1)
    await claimed(other, lease_seconds=1)
    await asyncio.sleep(1.1)
    reclaim = (await agent.post("/units/claim", json={})).json()
    assert (reclaim["unit"]["id"], reclaim["attempt"]["attempt_no"]) == (unit, 3)
    body = assert_refused(
        await agent.post(
            f"/units/{unit}/transition", json={"to": "in_progress", "attempt_id": old}
        ),
        "attempt_superseded",
    )
    assert "stop working" in body["detail"]
    assert_refused(await agent.post(f"/attempts/{old}/heartbeat", json={}), "attempt_superseded")
    assert_refused(
        await agent.post(
            f"/units/{unit}/dispose", json={"disposition": "DROPPED", "attempt_id": old}
        ),
        "attempt_superseded",
    )


async def test_stale_reclaim_by_another_agent_fences_the_first(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Agent-2 reclaims a lapsed lease; agent-1's block with its attempt is refused."""
    await register(operator, "a")
    first, second = (
        await api.as_role(Role.AGENT, "agent-1"),
        await api.as_role(Role.AGENT, "agent-2"),
    )
    unit, old = await claimed(first, start=True, lease_seconds=1)
    await asyncio.sleep(1.2)
    assert (await second.post("/units/claim", json={})).json()["unit"]["claimed_by"] == "agent-2"
    response = await first.post(f"/units/{unit}/block", json={"question": "q", "attempt_id": old})
    assert_refused(response, "attempt_superseded")


async def test_other_agents_unit_is_forbidden(api: Api, operator: httpx.AsyncClient) -> None:
    """Writing to a unit held by another agent is 403 not_holder; nothing changes."""
    await register(operator, "a")
    first, second = (
        await api.as_role(Role.AGENT, "agent-1"),
        await api.as_role(Role.AGENT, "agent-2"),
    )
    unit, attempt = await claimed(first)
    assert_problem(
        await second.post(f"/units/{unit}/transition", json={"to": "in_progress"}),
        403,
        "not_holder",
    )
    assert_problem(
        await second.post(f"/attempts/{attempt}/cost", json={"cost_cents": 5}), 403, "not_holder"
    )
    assert_problem(await second.post(f"/attempts/{attempt}/heartbeat", json={}), 403, "not_holder")
    shown = (await operator.get(f"/units/{unit}")).json()
    assert (shown["state"], shown["cost_cents"]) == ("claimed", 0)


async def test_cancelled_question_cannot_be_cancelled_again(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A closed question is final."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit, _ = await claimed(agent, start=True)
    question = (await agent.post(f"/units/{unit}/block", json={"question": "q"})).json()["question"]
    cancelled = await agent.post(f"/questions/{question['id']}/cancel", json={"reason": "found it"})
    assert cancelled.json()["status"] == "cancelled"
    body = assert_problem(await agent.post(f"/questions/{question['id']}/cancel", json={}), 409)
    assert body["invariant"] == "question_status_final"


async def test_unblock_when_holder_busy_is_refused(api: Api, operator: httpx.AsyncClient) -> None:
    """A blocked unit's holder that claimed another unit cannot be resumed on the first."""
    await register(operator, "a", "b")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    await agent.post(f"/units/{unit}/block", json={"question": "q"})
    await claimed(agent)
    assert_refused(
        await triage.post(f"/units/{unit}/unblock", json={"answer": "x"}),
        "one_live_claim_per_agent",
    )


async def test_unknown_unit_attempt_question_are_404(api: Api, operator: httpx.AsyncClient) -> None:
    """Unknown references are 404 problem+json."""
    assert_problem(await operator.get("/units/no-such-unit"), 404, "not_found")
    missing = "00000000-0000-4000-8000-000000000000"
    assert_problem(await operator.get(f"/units/{missing}"), 404, "not_found")
    assert_problem(await operator.post(f"/attempts/{missing}/heartbeat", json={}), 404, "not_found")
    assert_problem(await operator.get(f"/questions/{missing}"), 404, "not_found")
    assert_problem(await operator.get("/no/such/endpoint"), 404, "not_found")


async def test_every_409_names_invariant_unit_state_allowed(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A refusal that concerns no single unit still carries the four keys (null)."""
    await operator.post(
        "/units", json={"units": [{"external_ref": "a", "fleet": "f", "workflow_id": "wf-1"}]}
    )
    response = await operator.post(
        "/units", json={"units": [{"external_ref": "b", "fleet": "f", "workflow_id": "wf-1"}]}
    )
    body = assert_problem(response, 409)
    assert body["invariant"] == "unit_workflow_id_unique"
    assert (body["unit_id"], body["state"], body["allowed"]) == (None, None, [])
    assert [u["external_ref"] for u in (await operator.get("/units")).json()["items"]] == ["a"]
