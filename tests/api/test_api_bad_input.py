"""Bad input: a 4xx problem+json naming what to fix, nothing written, never a 500."""

from __future__ import annotations

from typing import Any

import httpx

from support.api_support import Api, MakeApi, assert_problem, claimed, register
from work_ledger.service.tokens import Role

JSON = {"Content-Type": "application/json"}


async def _written(operator: httpx.AsyncClient) -> tuple[int, int]:
    units = (await operator.get("/units", params={"limit": 500})).json()["items"]
    events = (await operator.get("/events", params={"limit": 500})).json()["items"]
    return len(units), len(events)


BAD_REGISTER_BODIES = [
    ('{"units": [', "JSON"),
    ("[]", "body"),
    ('{"units": "a"}', "units"),
    ('{"units": []}', "units"),
    ('{"units": [{"external_ref": "a"}]}', "fleet"),
    ('{"units": [{"external_ref": 5, "fleet": "f"}]}', "external_ref"),
    ('{"units": [{"external_ref": "' + "x" * 257 + '", "fleet": "f"}]}', "external_ref"),
    ('{"units": [{"external_ref": "", "fleet": "f"}]}', "external_ref"),
    ('{"units": [{"external_ref": "a", "fleet": "f", "owner": "me"}]}', "owner"),
    ('{"units": [{"external_ref": "a", "fleet": "f"}], "force": true}', "force"),
    ("", "body"),
    ("null", "body"),
    (
        '{"units": [{"external_ref": "a", "fleet": "f"}, {"external_ref": "a", "fleet": "f"}]}',
        "twice",
    ),
    ('{"units": [{"external_ref": "a\\u0000b", "fleet": "f"}]}', "external_ref"),
    ('{"units": [{"external_ref": "a", "fleet": "f\\u0000"}]}', "NUL"),
]


async def test_bad_register_bodies_are_422(api: Api, operator: httpx.AsyncClient) -> None:
    """Malformed JSON, wrong types, bounds and unknown fields: 422, no unit registered."""
    for body, where in BAD_REGISTER_BODIES:
        response = await operator.post("/units", content=body, headers=JSON)
        problem = assert_problem(response, 422, "invalid_input")
        assert where in problem["detail"], (body[:80], problem["detail"])
    assert await _written(operator) == (0, 0)


async def test_register_batch_over_1000_is_422(api: Api, operator: httpx.AsyncClient) -> None:
    """At most 1000 units per batch."""
    units = [{"external_ref": f"u{i}", "fleet": "f"} for i in range(1001)]
    assert_problem(await operator.post("/units", json={"units": units}), 422, "invalid_input")
    assert await _written(operator) == (0, 0)


BAD_WRITES: list[tuple[str, dict[str, Any]]] = [
    ("/units/claim", {"lease_seconds": 0}),
    ("/units/claim", {"lease_seconds": 86401}),
    ("/units/claim", {"lease_seconds": "60"}),
    ("/units/claim", {"wait_seconds": 61}),
    ("/units/claim", {"wait_seconds": -1}),
    ("/units/claim", {"domain": "d" * 257}),
    ("/units/claim", {"agent_id": "someone-else"}),
    ("/units/{unit}/transition", {"to": "done"}),
    ("/units/{unit}/transition", {"to": "verified"}),
    ("/units/{unit}/transition", {"to": "verified", "evidence_url": "ftp://ci.example/1"}),
    ("/units/{unit}/transition", {"to": "verified", "evidence_url": "javascript:alert(1)"}),
    ("/units/{unit}/transition", {"to": "verified", "evidence_url": "not a url"}),
    ("/units/{unit}/transition", {"to": "verified", "evidence_url": "https://"}),
    (
        "/units/{unit}/transition",
        {"to": "verified", "evidence_url": "https://ci.example/" + "x" * 2040},
    ),
    ("/units/{unit}/transition", {"to": "ready", "outcome": "verified"}),
    ("/units/{unit}/transition", {"to": "in_progress", "reason": "r" * 2001}),
    ("/units/{unit}/transition", {"to": "in_progress", "attempt_id": "not-a-uuid"}),
    ("/units/{unit}/block", {"question": ""}),
    ("/units/{unit}/block", {"question": "q" * 8001}),
    (
        "/units/{unit}/dispose",
        {"disposition": "MIGRATED", "evidence_url": "file:///etc/passwd"},
    ),
    ("/units/{unit}/dispose", {"disposition": "FINISHED"}),
    ("/attempts/{attempt}/cost", {"cost_cents": 0}),
    ("/attempts/{attempt}/cost", {"cost_cents": -5}),
    ("/attempts/{attempt}/cost", {"cost_cents": "abc"}),
    ("/attempts/{attempt}/cost", {"cost_cents": 1.5}),
    ("/attempts/{attempt}/cost", {"cost_cents": True}),
    ("/attempts/{attempt}/cost", {}),
    ("/attempts/{attempt}/heartbeat", {"lease_seconds": 10**9}),
    ("/attempts/not-a-uuid/heartbeat", {}),
]


async def test_bad_write_bodies_are_422_and_change_nothing(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Each bad write to a live unit is a 422 problem; the unit and the log are unchanged."""
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit, attempt = await claimed(agent, start=True)
    before = (await _written(operator), (await operator.get(f"/units/{unit}")).json())
    for path, body in BAD_WRITES:
        response = await agent.post(path.format(unit=unit, attempt=attempt), json=body)
        assert response.status_code == 422, (path, body, response.text)
        assert_problem(response, 422)
    after = (await _written(operator), (await operator.get(f"/units/{unit}")).json())
    assert after == before


async def test_evidence_outside_allowed_prefixes_is_422(make_api: MakeApi) -> None:
    """With WL_EVIDENCE_ALLOWED_PREFIXES set, other hosts are refused naming the rule."""
    api = await make_api(evidence_allowed_prefixes=("https://ci.example/",))
    operator = await api.as_role(Role.OPERATOR, "op")
    await register(operator, "a")
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit, _ = await claimed(agent, start=True)
    outside = {"to": "verified", "evidence_url": "https://paste.example/raw/1"}
    problem = assert_problem(await agent.post(f"/units/{unit}/transition", json=outside), 422)
    assert problem["invariant"] == "evidence_prefix_allowed"
    assert (await operator.get(f"/units/{unit}")).json()["state"] == "in_progress"
    inside = {"to": "verified", "evidence_url": "https://ci.example/run/1"}
    assert (await agent.post(f"/units/{unit}/transition", json=inside)).status_code == 200


async def test_body_over_1_mib_is_413(api: Api, operator: httpx.AsyncClient) -> None:
    """Over 1 MiB, with or without Content-Length: 413 problem, nothing registered."""
    big = '{"units": [{"external_ref": "a", "fleet": "' + "f" * (1 << 20) + '"}]}'
    assert_problem(
        await operator.post("/units", content=big, headers=JSON), 413, "payload_too_large"
    )

    async def chunks() -> Any:
        for _ in range(20):
            yield b" " * 65536

    streamed = await operator.post("/units", content=chunks(), headers=JSON)
    assert_problem(streamed, 413, "payload_too_large")
    assert await _written(operator) == (0, 0)


BAD_QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("/units", {"limit": 0}),
    ("/units", {"limit": 501}),
    ("/units", {"limit": "ten"}),
    ("/units", {"state": "finished"}),
    ("/units", {"cursor": "garbage"}),
    ("/events", {"cursor": "abc"}),
    ("/questions", {"wait_seconds": 61}),
    ("/questions", {"status": "pending"}),
    ("/questions/not-a-uuid", {}),
    ("/units/" + "x" * 300, {}),
]


async def test_bad_queries_are_422(operator: httpx.AsyncClient) -> None:
    """Out-of-bounds or malformed query parameters are 422 problem+json."""
    for path, params in BAD_QUERIES:
        response = await operator.get(path, params=params)
        assert response.status_code == 422, (path, params, response.text)
        assert_problem(response, 422, "invalid_input")


async def test_wrong_method_is_405_problem(operator: httpx.AsyncClient) -> None:
    """A GET on a POST-only endpoint is a 405 problem+json."""
    assert_problem(await operator.get("/units/claim/x/y"), 404)
    assert_problem(await operator.delete("/units"), 405, "method_not_allowed")
