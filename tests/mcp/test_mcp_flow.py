"""The MCP claim tool on DESIGN §13, against a stand-in HTTP API: a pause or a cap is a
stop signal (no retry loop), a held exclusion key sends the agent to another unit."""

from __future__ import annotations

import json
from typing import Any

import httpx

import mcp
from mcp import types as mcp_types
from work_ledger.client import AsyncClient
from work_ledger.mcp import build_server

UNIT = {"id": "u-1", "external_ref": "svc/a", "fleet": "f", "domain": "d", "state": "ready"}
EMPTY_CLAIM = {"unit": None, "attempt": None, "resumed": False}


class Api:
    """Answers by (method, path); keeps what was sent."""

    def __init__(self, answers: dict[tuple[str, str], httpx.Response | dict[str, Any]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode()
        self.sent.append((request.method, path, json.loads(request.content or b"null")))
        answer = self.answers[(request.method, path.split("?")[0])]
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)


def tools(api: Api) -> mcp.Client:
    transport = httpx.MockTransport(api)
    return mcp.Client(build_server(lambda: AsyncClient("http://ledger.test", transport=transport)))


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def refused(code: str, detail: str, **body: Any) -> httpx.Response:
    return httpx.Response(
        409,
        json={"code": code, "invariant": code, "detail": detail, "unit_id": "u-1", **body},
        headers={"content-type": "application/problem+json"},
    )


async def test_claim_in_a_paused_scope_is_a_stop_signal() -> None:
    api = Api(
        {
            ("POST", "/units/claim"): EMPTY_CLAIM,
            ("GET", "/units"): {"items": [UNIT], "next_cursor": None},
            ("POST", "/units/u-1/claim"): refused(
                "paused",
                "fleet f is paused (weekend).",
                fleet="f",
                domain=None,
                pause_reason="weekend",
            ),
        }
    )
    async with tools(api) as session:
        result = await session.call_tool("claim", {})
    assert result.is_error
    assert text(result).startswith("paused: fleet f is paused (weekend).")
    assert "do not retry and do not loop on claim" in text(result)
    # One pull-next and one look: the tool itself does not retry.
    assert [p for m, p, _ in api.sent if m == "POST"] == ["/units/claim", "/units/u-1/claim"]


async def test_a_named_claim_at_the_cap_is_a_stop_signal() -> None:
    api = Api(
        {
            ("POST", "/units/u-1/claim"): refused(
                "cap_reached",
                "fleet f has 5 live units and its cap is 5.",
                fleet="f",
                domain=None,
                max_live=5,
                live=5,
            ),
        }
    )
    async with tools(api) as session:
        result = await session.call_tool("claim", {"unit": "u-1"})
    assert result.is_error
    assert text(result).startswith("cap_reached: fleet f has 5 live units")
    assert "stop signal" in text(result)


async def test_a_held_key_on_a_named_claim_says_take_another_unit() -> None:
    api = Api(
        {
            ("POST", "/units/u-1/claim"): refused(
                "exclusive_key_held",
                "unit svc/a shares key 'src' with unit svc/b.",
                key="src",
                unit={"id": "u-2", "external_ref": "svc/b", "state": "in_progress"},
            ),
        }
    )
    async with tools(api) as session:
        result = await session.call_tool("claim", {"unit": "u-1"})
    assert result.is_error
    assert "Claim another unit (omit `unit`)" in text(result)
