"""A unit's whole life over real HTTP, and every refusal path of DESIGN §4 as a 409."""

from __future__ import annotations

import httpx

from support.api_support import Api, register
from work_ledger.service.tokens import Role

PROBLEM = "application/problem+json"


async def test_unit_life_register_to_migrated(api: Api, operator: httpx.AsyncClient) -> None:
    """register → claim → start → block → answer → cost → verify → dispose MIGRATED."""
    agent = await api.as_role(Role.AGENT, "agent-07")
    triage = await api.as_role(Role.TRIAGE, "triage-1")
    [unit] = await register(operator, "orders/refunds")
    claim = (await agent.post("/units/claim", json={})).json()
    assert (claim["unit"]["id"], claim["resumed"]) == (unit["id"], False)
    attempt = claim["attempt"]["id"]
    started = await agent.post(
        "/units/orders/refunds/transition", json={"to": "in_progress", "attempt_id": attempt}
    )
    assert started.json()["unit"]["state"] == "in_progress"
    blocked = await agent.post(
        "/units/orders/refunds/block",
        json={"question": "Keep the v1 route?", "attempt_id": attempt},
    )
    assert (blocked.status_code, blocked.json()["unit"]["state"]) == (201, "blocked")
    question_id = blocked.json()["question"]["id"]
    answered = await triage.post(
        f"/units/{unit['id']}/unblock", json={"answer": "yes", "question_id": question_id}
    )
    assert answered.json()["question"]["status"] == "answered"
    cost = await agent.post(f"/attempts/{attempt}/cost", json={"cost_cents": 125})
    assert cost.json()["unit"]["cost_cents"] == 125
    verified = await agent.post(
        "/units/orders/refunds/transition",
        json={"to": "verified", "evidence_url": "https://ci.example/run/1", "attempt_id": attempt},
    )
    assert verified.json()["attempt"]["outcome"] == "verified"
    done = await agent.post(
        "/units/orders/refunds/dispose", json={"disposition": "MIGRATED", "attempt_id": attempt}
    )
    assert (done.json()["unit"]["state"], done.json()["unit"]["disposition"]) == (
        "done",
        "MIGRATED",
    )
    shown = (await agent.get("/units/orders/refunds")).json()
    assert (len(shown["attempts"]), shown["questions"][0]["answer"]) == (1, "yes")
    events = (await agent.get("/units/orders/refunds/events")).json()["items"]
    assert [e["event_type"] for e in events] == [
        "disposed",
        "transitioned",
        "cost_recorded",
        "unblocked",
        "blocked",
        "transitioned",
        "claimed",
        "registered",
    ]
