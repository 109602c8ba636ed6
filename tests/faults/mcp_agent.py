"""An agent on MCP over HTTP, as its own process: claims a unit, then behaves as told.

    python mcp_agent.py MODE URL [URL...]      (WL_TOKEN and WL_UNIT in the environment)

MODE: `close` claims WL_UNIT, closes its session and exits; `idle` claims and then only keeps its
session (and its GET stream) open; `ping` also pings every WL_PING_SECONDS, and when a ping
fails (its replica died) opens a new session on the next URL, claims again (getting its unit
back), then idles. Each step is printed as one JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import TextContent

import mcp


def say(event: str, **facts: Any) -> None:
    print(json.dumps({"event": event, **facts}), flush=True)


async def claim(session: mcp.Client) -> None:
    result = await session.call_tool("claim", {"unit": os.environ["WL_UNIT"]})
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    say("claimed", text=text, error=result.is_error)


async def session_on(url: str, mode: str, first: bool) -> None:
    """One session on `url`; returns when a ping fails (the replica is gone)."""
    headers = {"Authorization": f"Bearer {os.environ['WL_TOKEN']}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        # The 2025 handshake, as Claude Code speaks it: a session with its own GET stream.
        mcp.Client(
            streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy"
        ) as session,
    ):
        await claim(session)
        if mode == "close":
            return
        pinging = mode == "ping" and first
        while True:
            await asyncio.sleep(float(os.environ.get("WL_PING_SECONDS", "1")))
            if pinging:
                await session.send_ping()


async def main(mode: str, urls: list[str]) -> None:
    for turn, url in enumerate(urls):
        try:
            await session_on(url, mode, first=turn == 0)
        except Exception as exc:  # the replica died under this session: reconnect elsewhere
            say("lost", url=url, error=type(exc).__name__)
            continue
        if mode == "close":
            say("closed")
            return


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
