"""The MCP server: its tools, driven by the mcp SDK's own client, against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp.client.stdio import StdioServerParameters

import mcp
from mcp import types as mcp_types
from support.wl_server import LedgerServer
from work_ledger.client import AsyncClient, Client
from work_ledger.mcp import build_server

EVIDENCE = "https://ci.example/runs/7"
TOOLS = {
    *("claim", "heartbeat", "record_cost", "ask", "verify", "dispose", "release", "show"),
    "split",
}


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def in_process(server: LedgerServer, principal: str = "agent-1") -> mcp.Client:
    token = server.token("agent", principal)
    return mcp.Client(build_server(lambda: AsyncClient(server.url, token)))


async def call(session: mcp.Client, tool: str, **arguments: Any) -> mcp_types.CallToolResult:
    return await session.call_tool(tool, arguments)


async def test_mcp_lists_nine_small_tools(ledger_server: LedgerServer) -> None:
    """Nine tools, each described, with short schemas (under ~1,200 tokens in all: an
    agent pays for them in every turn's context)."""
    async with in_process(ledger_server) as session:
        tools = (await session.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    assert all(t.description for t in tools)
    schema_chars = sum(len(json.dumps(t.input_schema)) for t in tools)
    assert schema_chars < 5000


async def test_mcp_stdio_drives_unit_to_done(ledger_server: LedgerServer, operator: Client) -> None:
    """Over stdio: claim, record_cost, verify, dispose MIGRATED; the ledger shows it done."""
    operator.register([{"external_ref": "billing/1", "fleet": "f"}])
    env = {
        **os.environ,
        "WL_URL": ledger_server.url,
        "WL_TOKEN": ledger_server.token("agent", "claude-1"),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from work_ledger.cli import main; main()", "mcp"],
        env=env,
    )
    async with mcp.Client(params) as session:
        assert len((await session.list_tools()).tools) == len(TOOLS)
        claimed = await call(session, "claim")
        assert "Claimed unit billing/1" in text(claimed)
        assert not (await call(session, "record_cost", cost_cents=42)).is_error
        assert not (await call(session, "verify", evidence_url=EVIDENCE)).is_error
        closed = await call(session, "dispose", disposition="MIGRATED")
        assert "done" in text(closed)
    detail = operator.get_unit("billing/1")
    assert (detail.unit.state, detail.unit.cost_cents, detail.unit.claimed_by) == ("done", 42, None)
    assert detail.attempts[0].agent_id == "claude-1"


async def test_mcp_refusal_names_rule_and_next_step(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """dispose MIGRATED before verify: an error text `code: detail` naming the rule."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    async with in_process(ledger_server) as session:
        await call(session, "claim")
        refused = await call(session, "dispose", disposition="MIGRATED")
    assert refused.is_error
    message = text(refused)
    assert message.startswith("invariant_violation: ")
    assert "unit_state_transition_allowed" in message
    assert "verify" in message


async def test_mcp_claim_empty_says_what_to_do(ledger_server: LedgerServer) -> None:
    """Nothing claimable: an error telling the model to call claim again later."""
    async with in_process(ledger_server) as session:
        empty = await call(session, "claim")
    assert empty.is_error
    assert text(empty).startswith("nothing_to_claim: ")
    assert "wait_seconds" in text(empty)


async def test_mcp_ask_returns_the_answer(ledger_server: LedgerServer, operator: Client) -> None:
    """ask blocks the unit and returns the answer once a human gives it."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])

    async def answer_soon() -> None:
        for _ in range(600):  # 60 s for the question to open
            if operator.get_unit("u1").open_question is not None:
                operator.unblock("u1", "use EUR")
                return
            await asyncio.sleep(0.1)

    async with in_process(ledger_server) as session:
        await call(session, "claim")
        asked, _ = await asyncio.gather(
            call(session, "ask", question="which currency?", wait_seconds=20), answer_soon()
        )
        shown = json.loads(text(await call(session, "show")))
    assert "Answer: use EUR" in text(asked)
    assert shown["unit"]["state"] == "in_progress"


async def test_mcp_claim_twice_resumes_then_release(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """A second claim returns the unit already held; release gives it back, attempt failed."""
    operator.register([{"external_ref": "u1", "fleet": "f"}, {"external_ref": "u2", "fleet": "f"}])
    async with in_process(ledger_server) as session:
        await call(session, "claim")
        again = await call(session, "claim")
        assert "Claimed unit u1 (you already held it)" in text(again)
        released = await call(session, "release", reason="tests keep failing")
        assert "Released u1" in text(released)
        nothing_held = await call(session, "verify", evidence_url=EVIDENCE)
    assert nothing_held.is_error
    assert text(nothing_held).startswith("no_unit: ")
    detail = operator.get_unit("u1")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")
