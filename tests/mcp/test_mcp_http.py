"""MCP over Streamable HTTP at /mcp: the stdio server's tools, the API's tokens, one server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_mcp_server import EVIDENCE, call, in_process, text

import mcp
from support.wl_server import LedgerServer
from work_ledger.client import Client

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def over_http(
    server: LedgerServer, token: str, agent: str | None = None
) -> AsyncIterator[mcp.Client]:
    """The SDK's own Streamable HTTP client on /mcp, with the bearer token (and sub-agent)."""
    headers = {"Authorization": f"Bearer {token}"}
    if agent is not None:
        headers["X-WL-Agent"] = agent
    async with (
        create_mcp_http_client(headers=headers) as http,
        mcp.Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as session,
    ):
        yield session


def tools_of(listed: Any) -> list[tuple[str, str | None, str]]:
    return sorted((t.name, t.description, repr(t.input_schema)) for t in listed.tools)


async def test_mcp_http_refuses_without_a_valid_token(ledger_server: LedgerServer) -> None:
    """No token, a malformed one or an unknown one: 401 problem+json, the SDK never reached."""
    async with httpx.AsyncClient(base_url=ledger_server.url) as http:
        bare = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)
        forged = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": "Bearer wl_abcdefgh_" + "x" * 40},
        )
        garbage = await http.post(
            "/mcp", json=INITIALIZE, headers={**ACCEPT, "Authorization": "Bearer nope"}
        )
    for answer in (bare, forged, garbage):
        assert answer.status_code == 401
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["code"] == "unauthorized"
    assert "mcp-session-id" not in bare.headers


async def test_mcp_http_serves_the_stdio_tools(ledger_server: LedgerServer) -> None:
    """The same tools, descriptions and schemas over HTTP as from the stdio server."""
    token = ledger_server.token("agent", "lister")
    async with over_http(ledger_server, token) as remote, in_process(ledger_server) as local:
        assert tools_of(await remote.list_tools()) == tools_of(await local.list_tools())


async def test_mcp_http_drives_a_unit_as_the_tokens_agent(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """claim, cost, verify, dispose over HTTP: the ledger records the token's sub-agent."""
    operator.register([{"external_ref": "http/1", "fleet": "f"}])
    token = ledger_server.token("agent", "remote")
    async with over_http(ledger_server, token, agent="remote/7") as session:
        assert "Claimed unit http/1" in text(await call(session, "claim"))
        assert operator.get_unit("http/1").unit.claimed_by == "remote/7"
        assert not (await call(session, "record_cost", cost_cents=5)).is_error
        assert not (await call(session, "verify", evidence_url=EVIDENCE)).is_error
        assert "done" in text(await call(session, "dispose", disposition="MIGRATED"))
    detail = operator.get_unit("http/1")
    assert (detail.unit.state, detail.unit.cost_cents) == ("done", 5)
    assert detail.attempts[0].agent_id == "remote/7"


async def test_mcp_http_refusals_read_as_over_stdio(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """The server's refusal and the tools' own read the same over HTTP and in-process."""
    operator.register([{"external_ref": "r1", "fleet": "f"}, {"external_ref": "r2", "fleet": "f"}])
    token = ledger_server.token("agent", "twin")
    texts = []
    for unit, client in (
        ("r1", in_process(ledger_server, "twin")),
        ("r2", over_http(ledger_server, token)),
    ):
        async with client as session:
            nothing = await call(session, "verify", evidence_url=EVIDENCE)
            await call(session, "claim", unit=unit)
            early = await call(session, "dispose", disposition="MIGRATED")
            await call(session, "release")
        texts.append((text(nothing), text(early).replace(unit, "UNIT")))
    assert texts[0] == texts[1]
    assert texts[0][0].startswith("no_unit: ")
    assert texts[0][1].startswith("invariant_violation: ")


async def test_mcp_http_sub_agent_must_belong_to_the_token(ledger_server: LedgerServer) -> None:
    """X-WL-Agent naming another principal: 403, as on every endpoint."""
    token = ledger_server.token("agent", "mine")
    async with httpx.AsyncClient(base_url=ledger_server.url) as http:
        answer = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": f"Bearer {token}", "X-WL-Agent": "theirs/1"},
        )
    assert answer.status_code == 403
    assert answer.json()["code"] == "forbidden"


async def test_mcp_http_unknown_session_is_404(ledger_server: LedgerServer) -> None:
    """A session this replica does not know (another's, or a dead one's): the spec's 404."""
    token = ledger_server.token("agent", "wanderer")
    async with httpx.AsyncClient(base_url=ledger_server.url) as http:
        answer = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
            headers={
                **ACCEPT,
                "Authorization": f"Bearer {token}",
                "Mcp-Session-Id": "0" * 32,
                "Mcp-Protocol-Version": "2025-06-18",
            },
        )
    assert answer.status_code == 404
