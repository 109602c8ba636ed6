"""The MCP server: an agent's whole loop on the ledger in a few small tools, over the SDK.

The server remembers the units this agent claimed (and their attempt, for fencing) and
heartbeats them in the background for as long as it runs; if the agent's session ends,
the heartbeats stop and the lease lapses, so another agent can take the unit over. Served
over HTTP by `serve` (`api/mcp_http.py`), the same tools find their `Session` per caller
and `serve` keeps the leases of live agents instead (`Session(heartbeat=False)`).
The tools live by group: `holding.py`, `asking.py`, `ending.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer

from work_ledger.client import AsyncClient
from work_ledger.mcp import asking, ending, holding
from work_ledger.mcp.session import Session, SessionFor

INSTRUCTIONS = """\
work-ledger hands out units of migration work, one at a time, and keeps their record.
Loop: claim -> do the work (record_cost as money is spent) -> verify with a link to the
evidence -> dispose MIGRATED -> claim the next. A human must answer something: ask.
Too big for one attempt: split it into sub-units. Cannot finish: release (the unit goes
back for another attempt). Heartbeats run by themselves while this server runs. A refusal
names the rule and what is allowed next; `attempt_superseded` means the claim is lost: stop
working on that unit and claim another; `budget_exhausted`, `paused` and `cap_reached`
mean stop claiming (no retry loop); `exclusive_key_held` means claim another unit."""

TOOLS = (*holding.TOOLS, *asking.TOOLS, *ending.TOOLS)
# Opens what the tools need and yields how a tool finds its caller's `Session`.
Lifespan = Callable[[MCPServer[SessionFor]], AbstractAsyncContextManager[SessionFor]]


def build_tools(lifespan: Lifespan) -> MCPServer[SessionFor]:
    """The MCP server and its tools; each call acts through the `Session` of its caller."""
    server = MCPServer(
        "work-ledger", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )
    for found in TOOLS:
        server.add_tool(found, structured_output=False)
    return server


def build_server(make_client: Callable[[], AsyncClient]) -> MCPServer[Any]:
    """The stdio MCP server of one agent; `make_client` builds the SDK client on first use."""
    session = Session(make_client)

    @asynccontextmanager
    async def lifespan(_: MCPServer[SessionFor]) -> AsyncIterator[SessionFor]:
        try:
            yield lambda _: session
        finally:
            await session.close()

    return build_tools(lifespan)
