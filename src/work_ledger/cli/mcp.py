"""`work-ledger mcp`: the agent tools as an MCP server on stdio, for Claude Code and others.

    claude mcp add work-ledger -e WL_URL=http://127.0.0.1:4001 -e WL_TOKEN=wl_... \\
        -- uv run work-ledger mcp
"""

from __future__ import annotations

import os

import typer

from work_ledger.cli.agent_client import client_settings
from work_ledger.cli.typer_app import app


@app.command()
def mcp() -> None:
    """Serve the agent tools over MCP on stdio (for Claude Code); uses WL_URL and WL_TOKEN.

    Tools: claim, heartbeat, record_cost, ask, verify, dispose, release, split, show.
    """
    from work_ledger.client import AsyncClient

    try:
        from work_ledger.mcp import build_server
    except ModuleNotFoundError as exc:  # a slim install: no MCP SDK
        raise typer.BadParameter(
            f"`mcp` needs {exc.name}: install `work-ledger[mcp]`, or add the ledger to your "
            "agent over HTTP (`claude mcp add --transport http work-ledger URL/mcp ...`)",
            param_hint="VERB",
        ) from None

    url, token = client_settings()
    agent = os.environ.get("WL_AGENT") or None
    build_server(lambda: AsyncClient(url, token, agent=agent)).run("stdio")
