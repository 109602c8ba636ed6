"""A caller's `Session` (the units it holds, heartbeating), and how a tool's answer reads.

Every refusal reads `code: detail`, plus the rule, the unit's state and what is allowed
next, so the model can decide its next call. `tool` turns a tool's body, which returns its
text or raises, into an MCP tool that answers an error result instead of raising.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, cast

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent

from work_ledger.client import AsyncClient, AsyncWork, Claim, NothingToClaim
from work_ledger.errors import AttemptSuperseded, WorkLedgerError
from work_ledger.mcp.explain import refusal

P = ParamSpec("P")


def render(exc: WorkLedgerError) -> str:
    """`code: detail`, then the rule, the state and the allowed next steps when known."""
    text = f"{exc.code}: {exc.detail}"
    facts = []
    if exc.invariant and exc.invariant not in exc.detail:
        facts.append(f"rule {exc.invariant}")
    if exc.state:
        facts.append(f"unit state {exc.state}")
    if exc.allowed:
        facts.append(f"allowed next: {', '.join(exc.allowed)}")
    return text + (f" ({'; '.join(facts)})" if facts else "")


class Refusal(Exception):
    """A refusal by this server itself (no unit held, no open question), as `code: detail`."""


class Session:
    """The units this agent holds through this server, each heartbeating in the background."""

    def __init__(self, make_client: Callable[[], AsyncClient], *, heartbeat: bool = True) -> None:
        self._make_client = make_client
        self._heartbeat = heartbeat
        self._client: AsyncClient | None = None
        self.works: dict[str, AsyncWork] = {}

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    async def close(self) -> None:
        for work in list(self.works.values()):
            await work.stop_heartbeat()
        self.works.clear()
        if self._client is not None:
            await self._client.aclose()

    async def hold(self, work: AsyncWork) -> None:
        """Heartbeat `work` from now on (replacing an older hold of the same unit)."""
        older = self.works.get(work.unit.id)
        if older is not None and older is not work:
            await older.stop_heartbeat()
        if self._heartbeat:
            work.start_heartbeat()
        self.works[work.unit.id] = work

    async def drop(self, work: AsyncWork) -> None:
        await work.stop_heartbeat()
        self.works.pop(work.unit.id, None)

    async def work_for(self, unit: str | None) -> AsyncWork:
        """The held unit named (or the only one held); else take over its live attempt."""
        held = [w for w in self.works.values() if unit in (None, w.unit.id, w.unit.external_ref)]
        if len(held) == 1:
            return held[0]
        if unit is None:
            raise Refusal(
                "no_unit: you hold "
                + (f"{len(held)} units; name one with `unit`" if held else "no unit; call claim")
            )
        detail = await self.client.get_unit(unit)
        live = detail.live_attempt
        if live is None:
            raise Refusal(
                f"no_live_attempt: unit {detail.unit.external_ref} is {detail.unit.state} and no "
                "attempt of it is running; claim it first (claim with unit=...)"
            )
        work = AsyncWork(self.client, Claim(detail.unit, live))
        await self.hold(work)
        return work

    async def guard(self, action: Awaitable[str]) -> CallToolResult:
        """Run a tool's body; a refusal becomes an error result reading `code: detail`."""
        try:
            return result(await action)
        except Refusal as exc:
            return result(str(exc), error=True)
        except NothingToClaim:
            return result(
                "nothing_to_claim: no unit is claimable right now. Call claim again later, "
                "or with wait_seconds (up to 60) to wait for one.",
                error=True,
            )
        except AttemptSuperseded as exc:
            for work in [w for w in self.works.values() if w.lost is not None]:
                await self.drop(work)
            return result(render(exc), error=True)
        except WorkLedgerError as exc:
            return result(refusal(exc) or render(exc), error=True)


# Finds the caller's Session: the one of a stdio server, or one per caller over HTTP. The
# server's lifespan yields it, so every tool reaches it through its `Context`.
SessionFor = Callable[[Context], Session]


def session_of(ctx: Context) -> Session:
    # Typed as the SDK's default (a dict); both lifespans (`build_server`, `api/mcp_http.py`)
    # yield a SessionFor.
    find = cast(SessionFor, ctx.request_context.lifespan_context)
    return find(ctx)


def result(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


def tool(body: Callable[P, Awaitable[str]]) -> Callable[P, Awaitable[CallToolResult]]:
    """The MCP tool of `body`, which takes a `Context` and returns its text: the SDK reads
    the parameters, their descriptions and the docstring off `body` (`__wrapped__`), and a
    refusal raised by `body` is answered as an error result."""

    async def run(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        ctx = next(a for a in (*args, *kwargs.values()) if isinstance(a, Context))
        return await session_of(ctx).guard(body(*args, **kwargs))

    functools.update_wrapper(run, body)
    return run


def lease_text(work: AsyncWork) -> str:
    until = work.unit.lease_expires_at
    return "" if until is None else f", lease until {until:%H:%M:%SZ}"
