"""Bounded input: JSON nested to any depth is a 2xx or a 422 naming the field, never a 500."""

from __future__ import annotations

import httpx
import pytest

from support.api_support import Api, assert_problem
from work_ledger.api.wire import MAX_FREE_DEPTH
from work_ledger.service.tokens import Role

JSON = {"Content-Type": "application/json"}


def _event(detail_depth: int) -> bytes:
    """A projection batch whose one event's `detail` nests `detail_depth` levels."""
    detail = '{"a":' * (detail_depth - 1) + "{}" + "}" * (detail_depth - 1)
    return (
        '{"events":[{"source_event_id":"nest-' + str(detail_depth) + '","workflow_id":"wf-none",'
        '"type":"progressed","occurred_at":"2026-01-01T00:00:00Z","detail":' + detail + "}]}"
    ).encode()


@pytest.fixture
async def projector(api: Api) -> httpx.AsyncClient:
    return await api.as_role(Role.PROJECTOR, "proj")


async def test_free_form_detail_within_its_limit_is_accepted(projector: httpx.AsyncClient) -> None:
    """`detail` nested exactly to the documented limit is taken (the event is unmatched)."""
    response = await projector.post(
        "/projection/events", content=_event(MAX_FREE_DEPTH), headers=JSON
    )
    assert response.status_code == 200, response.text
    assert response.json()["unmatched"] == 1


@pytest.mark.parametrize("depth", [MAX_FREE_DEPTH + 1, 199, 600, 900, 3000, 100_000])
async def test_deep_detail_is_422_naming_the_field(
    projector: httpx.AsyncClient, depth: int
) -> None:
    """Past the limit, at any depth: 422 whose first error names events[0].detail."""
    response = await projector.post("/projection/events", content=_event(depth), headers=JSON)
    problem = assert_problem(response, 422, "invalid_input")
    assert problem["errors"][0]["loc"][:4] == ["body", "events", 0, "detail"], problem
    assert "events[0].detail" in problem["detail"]


async def test_deep_json_in_a_typed_body_is_422(api: Api) -> None:
    """A document nested 100,000 deep where a claim body belongs: 422 naming where."""
    agent = await api.as_role(Role.AGENT, "a")
    deep = b'{"domain":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    problem = assert_problem(
        await agent.post("/units/claim", content=deep, headers=JSON), 422, "invalid_input"
    )
    assert problem["errors"][0]["loc"][:2] == ["body", "domain"], problem
    assert (await agent.get("/healthz")).status_code == 200
