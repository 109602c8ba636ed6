"""POST /projection/events over the real HTTP app."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from support.projection_streams import EVIDENCE, register_workflows, token
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role


def _events(workflow_id: str) -> list[dict[str, object]]:
    base = {"namespace": "migrations", "workflow_id": workflow_id, "run_id": "run-1"}
    return [
        base | {"event_id": 1, "type": "started", "occurred_at": "2026-01-05T09:00:00Z"},
        base | {"event_id": 5, "type": "progressed", "occurred_at": "2026-01-05T09:01:00Z"},
        base
        | {
            "event_id": 9,
            "type": "completed",
            "occurred_at": "2026-01-05T09:02:00Z",
            "detail": {"evidence_url": EVIDENCE},
        },
    ]


async def test_projection_route_applies_then_reports_duplicates(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """First delivery applies 3; the replay (no Idempotency-Key) reports 3 duplicates."""
    await register_workflows(ledger, "wf-1")
    first = await projector_client.post("/projection/events", json={"events": _events("wf-1")})
    second = await projector_client.post("/projection/events", json={"events": _events("wf-1")})
    counts = ("applied", "duplicates", "refused", "stale", "unmatched")
    assert [first.json()[k] for k in counts] == [3, 0, 0, 0, 0]
    assert [second.json()[k] for k in counts] == [0, 3, 0, 0, 0]
    assert second.json()["results"][0]["source_event_id"] == "temporal/migrations/wf-1/run-1/1"
    assert (await ledger.get_unit("unit-wf-1")).unit.state == "verified"


async def test_projection_route_is_for_the_projector_role(app: FastAPI) -> None:
    """An agent token is refused with 403 naming the role the endpoint takes."""
    headers = {"Authorization": f"Bearer {await token(app, Role.AGENT, 'agent-1')}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ledger.test", headers=headers
    ) as client:
        response = await client.post("/projection/events", json={"events": _events("wf-1")})
    assert (response.status_code, "projector" in response.json()["detail"]) == (403, True)


async def test_projection_route_refuses_malformed_events_with_422(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """Unknown type, naive time, unknown field: 422 problem+json, nothing written."""
    await register_workflows(ledger, "wf-1")
    bad = [
        {"workflow_id": "wf-1", "type": "paused", "occurred_at": "2026-01-05T09:00:00Z"},
        {"workflow_id": "wf-1", "type": "started", "occurred_at": "2026-01-05T09:00:00"},
        {"workflow_id": "wf-1", "type": "started", "occurred_at": "2026-01-05T09:00:00Z", "x": 1},
    ]
    for event in bad:
        response = await projector_client.post("/projection/events", json={"events": [event]})
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
    missing_key = {"workflow_id": "wf-1", "type": "started", "occurred_at": "2026-01-05T09:00:00Z"}
    response = await projector_client.post("/projection/events", json={"events": [missing_key]})
    assert (response.status_code, "run_id and event_id" in response.json()["detail"]) == (422, True)
    assert (await ledger.get_unit("unit-wf-1")).unit.state == "ready"
