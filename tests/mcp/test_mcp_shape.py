"""The MCP tools on DESIGN §12, against a stand-in HTTP API (httpx.MockTransport): what the
claim tool says when a budget, an attempt limit or prerequisites stop it, and what split
and record_cost send."""

from __future__ import annotations

import json
from typing import Any

import httpx

import mcp
from mcp import types as mcp_types
from work_ledger.client import AsyncClient
from work_ledger.mcp import build_server

UNIT = {"id": "u-1", "external_ref": "svc/a", "fleet": "f", "domain": "d", "state": "in_progress"}
ATTEMPT = {"id": "a-1", "unit_id": "u-1", "attempt_no": 1, "agent_id": "x", "outcome": None}
LIB = {"id": "u-0", "external_ref": "lib", "state": "blocked", "disposition": None}
EMPTY_CLAIM = {"unit": None, "attempt": None, "resumed": False}


def problem(rule: str, detail: str, **body: Any) -> httpx.Response:
    """A 409 as the server words an invariant (its class named by `code`, the rule by
    `invariant`), for a rule this SDK has no class of."""
    return httpx.Response(
        409,
        json={"code": "invariant_violation", "invariant": rule, "detail": detail, **body},
        headers={"content-type": "application/problem+json"},
    )


Answer = httpx.Response | dict[str, Any]


class Api:
    """Answers by (method, path), a list's items one call after another; keeps what was
    sent (the path with its query)."""

    def __init__(self, answers: dict[tuple[str, str], Answer | list[Answer]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode()
        self.sent.append((request.method, path, json.loads(request.content or b"null")))
        answer = self.answers[(request.method, path.split("?")[0])]
        if isinstance(answer, list):
            answer = answer.pop(0)
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)


def tools(api: Api) -> mcp.Client:
    transport = httpx.MockTransport(api)
    return mcp.Client(build_server(lambda: AsyncClient("http://ledger.test", transport=transport)))


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


async def test_claim_stopped_by_a_budget_names_cap_and_spend_and_says_stop() -> None:
    """Pull-next finds nothing while a unit is ready: the claim of that unit is refused by
    its budget, and the tool names the cap and the spend and says not to retry."""
    api = Api(
        {
            ("POST", "/units/claim"): EMPTY_CLAIM,
            ("GET", "/units"): {"items": [{**UNIT, "state": "ready"}], "next_cursor": None},
            ("POST", "/units/u-1/claim"): problem(
                "budget_exhausted",
                "the budget of fleet f is spent",
                fleet="f",
                domain=None,
                cap_cents=100,
                spent_cents=120,
            ),
        }
    )
    async with tools(api) as session:
        result = await session.call_tool("claim", {})
    assert result.is_error
    assert text(result).startswith(
        "budget_exhausted: the budget of fleet f: 120 of 100 cents spent."
    )
    assert "Stop claiming: retrying cannot succeed." in text(result)


async def test_claim_with_nothing_ready_names_what_units_wait_on() -> None:
    """Nothing ready: the tool lists the waiting units and what each waits on."""
    waiting = {**UNIT, "state": "waiting"}
    api = Api(
        {
            ("POST", "/units/claim"): EMPTY_CLAIM,
            ("GET", "/units"): [
                {"items": [], "next_cursor": None},
                {"items": [waiting], "next_cursor": "more"},
            ],
            ("GET", "/units/u-1"): {
                **waiting,
                "waiting_on": [{"kind": "prerequisite", "unit": LIB}],
            },
        }
    )
    async with tools(api) as session:
        result = await session.call_tool("claim", {"domain": "d"})
    assert result.is_error
    assert "nothing_to_claim: no unit is claimable in domain 'd' right now." in text(result)
    assert "Units waiting (and more):\n- svc/a waits on prerequisite lib (blocked)" in text(result)
    asked = [path for _, path, _ in api.sent if path.startswith("/units?")]
    assert asked == ["/units?state=ready&domain=d&limit=1", "/units?state=waiting&domain=d&limit=5"]


async def test_named_claim_refusals_say_what_to_do_instead() -> None:
    """attempt_limit_reached: a human was asked, claim another; prerequisites_unfinished:
    names them."""
    api = Api(
        {
            ("POST", "/units/svc%2Fa/claim"): problem(
                "prerequisites_unfinished",
                "svc/a waits on lib",
                waiting_on=[{"kind": "prerequisite", "unit": LIB}],
            ),
            ("POST", "/units/svc%2Fb/claim"): problem(
                "attempt_limit_reached", "svc/b failed 5 of 5 allowed attempts"
            ),
        }
    )
    async with tools(api) as session:
        held = await session.call_tool("claim", {"unit": "svc/a"})
        limited = await session.call_tool("claim", {"unit": "svc/b"})
    assert text(held).startswith(
        "prerequisites_unfinished: the unit waits on prerequisite lib (blocked)."
    )
    assert text(limited).startswith("attempt_limit_reached: svc/b failed 5 of 5 allowed")
    assert "do not retry it. Claim another unit." in text(limited)


async def test_split_and_record_cost_send_children_and_tokens() -> None:
    """split hands back the held unit as children (in_order: each requires the one
    before); record_cost carries the model and the token classes."""
    claimed = {"unit": UNIT, "attempt": ATTEMPT, "resumed": False}
    api = Api(
        {
            ("POST", "/units/claim"): claimed,
            ("POST", "/attempts/a-1/cost"): {"unit": {**UNIT, "cost_cents": 3}, "attempt": ATTEMPT},
            ("POST", "/units/u-1/split"): httpx.Response(
                201,
                json={
                    "unit": {**UNIT, "state": "waiting"},
                    "children": [
                        {"id": "c-1", "external_ref": "svc/a/1"},
                        {"id": "c-2", "external_ref": "svc/a/2"},
                    ],
                },
            ),
        }
    )
    async with tools(api) as session:
        assert not (await session.call_tool("claim", {})).is_error
        cost = {"cost_cents": 3, "model": "claude-opus-4-6", "input_tokens": 10, "estimated": True}
        assert not (await session.call_tool("record_cost", cost)).is_error
        done = await session.call_tool(
            "split", {"children": ["svc/a/1", "svc/a/2"], "in_order": True, "reason": "big"}
        )
    assert text(done).startswith("Split svc/a into 2 units: svc/a/1, svc/a/2. It is waiting")
    bodies = {path: body for _, path, body in api.sent}
    assert bodies["/attempts/a-1/cost"] == cost
    assert bodies["/units/u-1/split"] == {
        "units": [
            {"external_ref": "svc/a/1"},
            {"external_ref": "svc/a/2", "requires": ["svc/a/1"]},
        ],
        "reason": "big",
        "attempt_id": "a-1",
    }
