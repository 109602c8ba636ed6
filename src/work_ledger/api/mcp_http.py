"""MCP over Streamable HTTP at `/mcp`: the stdio server's tools, served by `serve` to every agent.

    claude mcp add --transport http work-ledger http://HOST:4001/mcp \\
        --header "Authorization: Bearer $WL_TOKEN"

The official SDK's Streamable HTTP app (stateful sessions) sits behind the API's own bearer
tokens: no token or a bad one gets 401 problem+json before the SDK sees the request, the
token's principal is the agent (`X-WL-Agent: principal/suffix` names a sub-agent), and a
session answers only the agent that opened it. The tools are `mcp/server.py`'s, unchanged:
each caller gets a `Session` whose SDK client calls this same app in-process, so a tool's
answer and refusals read exactly as over stdio.

Liveness, the stdio promise kept across replicas: an agent lives while it has an open MCP
stream on this replica (any request in flight: a 2025 session's GET stream, a long `ask`,
a 2026 subscription), or made a call since the last tick. Every
third of a lease each replica renews the live leases of the agents it sees alive, in one
statement (`heartbeat_agents`); nothing else is remembered, so when a replica dies its
agents reconnect anywhere (the spec's 404, then a new session) and the replica they reach
takes over their leases. An agent that stops, or whose stream closes, lapses within a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from work_ledger.api.auth import authenticate
from work_ledger.client import AsyncClient
from work_ledger.mcp.server import build_tools
from work_ledger.mcp.session import Session, SessionFor
from work_ledger.service.ledger import Ledger

PATH = "/mcp"
# The in-process base URL of the tools' SDK client: its requests never leave this process.
INTERNAL_URL = "http://work-ledger.internal"


class Liveness:
    """Who this replica sees alive: an open MCP stream here, or a call since the last tick."""

    def __init__(self) -> None:
        self.streams: Counter[str] = Counter()
        self.called: set[str] = set()

    @contextlib.contextmanager
    def stream(self, agent: str) -> Any:
        self.streams[agent] += 1
        try:
            yield
        finally:
            self.streams[agent] -= 1
            if self.streams[agent] <= 0:
                del self.streams[agent]

    def take_alive(self) -> list[str]:
        """The agents alive since the last tick (and forget the calls counted for it)."""
        alive = set(self.streams) | self.called
        self.called = set()
        return sorted(alive)


class Sessions:
    """One tools `Session` per caller (token and acting agent), dropped once long unused."""

    def __init__(self, app: ASGIApp) -> None:
        self._transport = httpx.ASGITransport(app=app)
        self._sessions: dict[tuple[str, str], tuple[Session, float]] = {}

    def session_for(self, ctx: Context) -> Session:
        request = ctx.request_context.request
        assert request is not None, "an MCP call over HTTP carries its request"
        user = request.scope["user"]
        assert isinstance(user, AuthenticatedUser)
        token, agent = user.access_token.token, user.access_token.client_id
        key = (token, agent)
        found = self._sessions.get(key)
        if found is None:
            session = Session(lambda: self._client(token, agent), heartbeat=False)
        else:
            session = found[0]
        self._sessions[key] = (session, time.monotonic())
        return session

    def _client(self, token: str, agent: str) -> AsyncClient:
        # No retries: the app is in this process, so a failure is an answer, not a network blip.
        return AsyncClient(INTERNAL_URL, token, agent=agent, retries=0, transport=self._transport)

    async def expire(self, unused_for: float, alive: set[str]) -> None:
        """Close the sessions of agents not alive and unused for `unused_for` seconds."""
        cutoff = time.monotonic() - unused_for
        for key, (session, used) in list(self._sessions.items()):
            if used < cutoff and key[1] not in alive:
                del self._sessions[key]
                await session.close()

    async def close(self) -> None:
        for session, _ in self._sessions.values():
            await session.close()
        self._sessions.clear()


class McpEndpoint:
    """`/mcp`: authenticate with the API's tokens, count the agent's streams, hand on to the SDK."""

    def __init__(self, inner: ASGIApp, liveness: Liveness) -> None:
        self.inner = inner
        self.liveness = liveness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        caller = await authenticate(request)  # a WorkLedgerError is answered as problem+json
        token = request.headers["authorization"].partition(" ")[2].strip()
        # The SDK binds each session to this identity: another agent's requests get 404.
        scope["user"] = AuthenticatedUser(
            AccessToken(token=token, client_id=caller.agent, scopes=[])
        )
        if request.method == "POST":
            self.liveness.called.add(caller.agent)
        with self.liveness.stream(caller.agent):
            await self.inner(scope, receive, send)


class McpHttp:
    """The MCP server, its sessions and the liveness of its agents, for one app."""

    def __init__(self, app: FastAPI) -> None:
        self.liveness = Liveness()
        self.sessions = Sessions(app)

        @asynccontextmanager
        async def lifespan(_: MCPServer[SessionFor]) -> AsyncIterator[SessionFor]:
            try:
                yield self.sessions.session_for
            finally:
                await self.sessions.close()

        self.server = build_tools(lifespan)
        # Every request carries a bearer token, which a DNS-rebinding page cannot have.
        sdk_app = self.server.streamable_http_app(
            streamable_http_path=PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.endpoint = McpEndpoint(sdk_app, self.liveness)

    @asynccontextmanager
    async def running(self, ledger: Ledger) -> AsyncIterator[None]:
        """The SDK's session manager, and the task renewing live agents' leases."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def serve_sessions() -> None:
            async with self.server.session_manager.run():
                started.set()
                await stop.wait()

        # In a task of its own: the SDK's task group must be left by the task that entered
        # it, and a lifespan may end in another task than the one it began in.
        sessions = asyncio.create_task(serve_sessions())
        ready = asyncio.create_task(started.wait())
        await asyncio.wait({sessions, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            ready.cancel()
            sessions.result()  # the manager failed to start: raise its error
        keeper = asyncio.create_task(self._keep_leases(ledger))
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            stop.set()
            await sessions

    async def _keep_leases(self, ledger: Ledger) -> None:
        every = ledger.lease_seconds / 3
        while True:
            await asyncio.sleep(every)
            alive = self.liveness.take_alive()
            # A failed renewal (database briefly down) is retried at the next tick, a third
            # of a lease later; the lease itself still covers the gap.
            with contextlib.suppress(Exception):
                await ledger.heartbeat_agents(alive)
            await self.sessions.expire(2 * ledger.lease_seconds, set(alive))


def mount(app: FastAPI) -> McpHttp:
    """Serve MCP at `/mcp` on `app`; enter `running(ledger)` in the app's lifespan."""
    mcp_http = McpHttp(app)
    app.router.routes.append(Route(PATH, mcp_http.endpoint, include_in_schema=False))
    return mcp_http
