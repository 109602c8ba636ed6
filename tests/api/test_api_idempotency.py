"""Idempotency-Key on every write: a replay returns the first outcome and changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx

from support.api_support import Api, assert_problem, claimed, register
from work_ledger.service.tokens import Role


async def _events(operator: httpx.AsyncClient) -> int:
    return len((await operator.get("/events", params={"limit": 500})).json()["items"])


async def _replayed(
    client: httpx.AsyncClient, operator: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> httpx.Response:
    """POST twice with one key: the second is the first, replayed, with no new event."""
    key = str(uuid.uuid4())
    first = await client.post(path, json=body, headers={"Idempotency-Key": key})
    events = await _events(operator)
    second = await client.post(path, json=body, headers={"Idempotency-Key": key})
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == "true"
    assert (second.status_code, second.content) == (first.status_code, first.content)
    assert await _events(operator) == events
    return first


async def test_every_write_replays_without_a_second_effect(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """register, claim, start, heartbeat, cost, block, unblock, verify, dispose, cancel."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    units = {"units": [{"external_ref": "a", "fleet": "f"}, {"external_ref": "b", "fleet": "f"}]}
    assert (await _replayed(operator, operator, "/units", units)).json()["created"] == 2
    claim = (await _replayed(agent, operator, "/units/claim", {})).json()
    unit, attempt = claim["unit"]["id"], claim["attempt"]["id"]
    await _replayed(agent, operator, f"/units/{unit}/transition", {"to": "in_progress"})
    await _replayed(agent, operator, f"/attempts/{attempt}/heartbeat", {"lease_seconds": 90})
    cost = await _replayed(agent, operator, f"/attempts/{attempt}/cost", {"cost_cents": 125})
    assert cost.json()["unit"]["cost_cents"] == 125
    assert (await operator.get(f"/units/{unit}")).json()["cost_cents"] == 125
    blocked = await _replayed(agent, operator, f"/units/{unit}/block", {"question": "q1"})
    assert blocked.status_code == 201
    await _replayed(triage, operator, f"/units/{unit}/unblock", {"answer": "yes"})
    question = (await agent.post(f"/units/{unit}/block", json={"question": "q2"})).json()
    await _replayed(agent, operator, f"/questions/{question['question']['id']}/cancel", {})
    verify = {"to": "verified", "evidence_url": "https://ci.example/1"}
    await _replayed(agent, operator, f"/units/{unit}/transition", verify)
    done = await _replayed(agent, operator, f"/units/{unit}/dispose", {"disposition": "MIGRATED"})
    assert done.json()["unit"]["state"] == "done"
    other = await api.as_role(Role.AGENT, "agent-2")
    await _replayed(other, operator, "/units/b/claim", {})


async def test_retried_claim_never_claims_a_second_unit(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A claim retried after its unit was released returns the first answer, claims nothing."""
    await register(operator, "a", "b")
    agent = await api.as_role(Role.AGENT, "agent-1")
    key = {"Idempotency-Key": "claim-1"}
    first = await agent.post("/units/claim", json={}, headers=key)
    unit = first.json()["unit"]["id"]
    await agent.post(f"/units/{unit}/transition", json={"to": "ready"})
    retried = await agent.post("/units/claim", json={}, headers=key)
    assert retried.json()["unit"]["id"] == unit
    states = {u["external_ref"]: u["state"] for u in (await operator.get("/units")).json()["items"]}
    assert states == {"a": "ready", "b": "ready"}


async def test_same_key_different_body_is_422(api: Api, operator: httpx.AsyncClient) -> None:
    """Reusing a key for another request is refused; nothing is written."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    _, attempt = await claimed(agent)
    key = {"Idempotency-Key": "cost-1"}
    await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 10}, headers=key)
    reused = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 20}, headers=key)
    assert_problem(reused, 422, "idempotency_key_reused")
    elsewhere = await agent.post("/units/claim", json={}, headers=key)
    assert_problem(elsewhere, 422, "idempotency_key_reused")
    assert (await operator.get("/units/a")).json()["cost_cents"] == 10


async def test_keys_are_scoped_to_the_caller(api: Api, operator: httpx.AsyncClient) -> None:
    """Two agents may use the same key for their own requests."""
    await register(operator, "a", "b")
    one, two = await api.as_role(Role.AGENT, "agent-1"), await api.as_role(Role.AGENT, "agent-2")
    key = {"Idempotency-Key": "same"}
    first = (await one.post("/units/claim", json={}, headers=key)).json()
    second = (await two.post("/units/claim", json={}, headers=key)).json()
    assert first["unit"]["id"] != second["unit"]["id"]


async def test_concurrent_duplicates_apply_once(api: Api, operator: httpx.AsyncClient) -> None:
    """Ten simultaneous copies of one cost write: one effect, ten identical answers."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    _, attempt = await claimed(agent)
    key = {"Idempotency-Key": "burst"}
    responses = await asyncio.gather(
        *(
            agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 7}, headers=key)
            for _ in range(10)
        )
    )
    assert len({r.content for r in responses}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == 9
    assert (await operator.get("/units/a")).json()["cost_cents"] == 7


async def test_refusal_is_replayed_as_refused(api: Api, operator: httpx.AsyncClient) -> None:
    """A 409 outcome is stored too: the retry gets the same 409, even if the state changed."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit, _ = await claimed(agent)
    key = {"Idempotency-Key": "verify-early"}
    verify = {"to": "verified", "evidence_url": "https://ci.example/1"}
    first = await agent.post(f"/units/{unit}/transition", json=verify, headers=key)
    await agent.post(f"/units/{unit}/transition", json={"to": "in_progress"})
    again = await agent.post(f"/units/{unit}/transition", json=verify, headers=key)
    assert (first.status_code, again.status_code, again.content) == (409, 409, first.content)


async def test_bad_idempotency_key_is_422(api: Api, operator: httpx.AsyncClient) -> None:
    """A key over 255 characters is refused before anything runs."""
    response = await operator.post(
        "/units",
        json={"units": [{"external_ref": "a", "fleet": "f"}]},
        headers={"Idempotency-Key": "k" * 256},
    )
    assert_problem(response, 422, "invalid_input")
    assert (await operator.get("/units")).json()["items"] == []


async def test_rejected_input_frees_the_key_for_a_corrected_retry(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A 422 or 403 under a key is not kept: the corrected request may reuse the key."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    _, attempt = await claimed(agent)
    key = {"Idempotency-Key": "fix-me"}
    bad = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": "12"}, headers=key)
    assert_problem(bad, 422, "invalid_input")
    good = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 12}, headers=key)
    assert (good.status_code, good.json()["unit"]["cost_cents"]) == (200, 12)
    again = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 12}, headers=key)
    assert (again.headers["Idempotent-Replayed"], again.content) == ("true", good.content)


async def test_refusal_after_a_failed_statement_works_under_a_key(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Inside the keyed transaction a statement refused by a constraint still gets its 409."""
    await register(operator, "a", "b")
    agent = await api.as_role(Role.AGENT, "agent-1")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    unit, _ = await claimed(agent, start=True)
    await agent.post(f"/units/{unit}/block", json={"question": "q"})
    await claimed(agent)
    key = {"Idempotency-Key": "busy"}
    first = await triage.post(f"/units/{unit}/unblock", json={"answer": "x"}, headers=key)
    assert (first.status_code, first.json()["invariant"]) == (409, "one_live_claim_per_agent")
    again = await triage.post(f"/units/{unit}/unblock", json={"answer": "x"}, headers=key)
    assert (again.headers["Idempotent-Replayed"], again.content) == ("true", first.content)


async def test_unfinished_reservation_written_by_hand_is_refused_not_rerun(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """A key left reserved with no outcome (written here by hand; no crash leaves it, as a
    keyed write commits its key and outcome together) is a 409 outcome unknown, never a
    second charge. Real crashes: tests/faults/test_crash.py."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    _, attempt = await claimed(agent)
    key = {"Idempotency-Key": "cost-1"}
    assert (
        await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 500}, headers=key)
    ).status_code == 200
    await raw.execute(
        "UPDATE wl_idempotency_keys SET status_code = NULL, content_type = NULL, body = NULL, "
        "completed_at = NULL, created_at = now() - interval '1 hour' WHERE key = 'cost-1'"
    )
    retry = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 500}, headers=key)
    assert assert_problem(retry, 409)["invariant"] == "idempotency_outcome_unknown"
    assert (await operator.get("/units/a")).json()["cost_cents"] == 500


async def test_keyed_write_and_its_outcome_commit_together(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """After a keyed write, the stored outcome and the ledger change are both there."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    _, attempt = await claimed(agent)
    key = {"Idempotency-Key": "together"}
    await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 9}, headers=key)
    row = await raw.fetchrow(
        "SELECT k.status_code, k.completed_at = e.created_at AS same_tx "
        "FROM wl_idempotency_keys AS k, work_unit_events AS e "
        "WHERE k.key = 'together' AND e.event_type = 'cost_recorded'"
    )
    assert (row["status_code"], row["same_tx"]) == (200, True)


async def test_concurrent_duplicate_claims_claim_once(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Ten simultaneous copies of one keyed claim: one unit claimed, ten identical answers."""
    await register(operator, "a", "b", "c")
    token = await api.token(Role.AGENT, "fleet")
    clients = [api.client(token, **{"X-WL-Agent": "fleet/w1"}) for _ in range(10)]
    key = {"Idempotency-Key": "claim-burst"}
    responses = await asyncio.gather(
        *(c.post("/units/claim", json={}, headers=key) for c in clients)
    )
    assert len({r.content for r in responses}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == 9
    states = [u["state"] for u in (await operator.get("/units")).json()["items"]]
    assert sorted(states) == ["claimed", "ready", "ready"]
