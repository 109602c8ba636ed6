"""The MCP server: an agent's whole loop on the ledger in eight small tools, over the SDK.

The server remembers the units this agent claimed (and their attempt, for fencing) and
heartbeats them in the background for as long as it runs; if the agent's session ends,
the heartbeats stop and the lease lapses, so another agent can take the unit over. Served
over HTTP by `serve` (`api/mcp_http.py`), the same tools find their `Session` per caller
and `serve` keeps the leases of live agents instead (`Session(heartbeat=False)`).
Every refusal reads `code: detail`, plus the rule, the unit's state and what is allowed
next, so the model can decide its next call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from work_ledger.client import AsyncClient, AsyncWork, Claim, NothingToClaim, to_json
from work_ledger.errors import AttemptSuperseded, WorkLedgerError

INSTRUCTIONS = """\
work-ledger hands out units of migration work, one at a time, and keeps their record.
Loop: claim -> do the work (record_cost as money is spent) -> verify with a link to the
evidence -> dispose MIGRATED -> claim the next. A human must answer something: ask.
Cannot finish: release (the unit goes back for another attempt). Heartbeats run by
themselves while this server runs. A refusal names the rule and what is allowed next;
`attempt_superseded` means the claim is lost: stop working on that unit and claim another."""

UnitRef = Annotated[
    str | None,
    Field(description="Unit id or external_ref; omit for the unit you hold."),
]


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
            return _result(await action)
        except Refusal as exc:
            return _result(str(exc), error=True)
        except NothingToClaim:
            return _result(
                "nothing_to_claim: no unit is claimable right now. Call claim again later, "
                "or with wait_seconds (up to 60) to wait for one.",
                error=True,
            )
        except AttemptSuperseded as exc:
            for work in [w for w in self.works.values() if w.lost is not None]:
                await self.drop(work)
            return _result(render(exc), error=True)
        except WorkLedgerError as exc:
            return _result(render(exc), error=True)


def _result(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


def _lease(work: AsyncWork) -> str:
    until = work.unit.lease_expires_at
    return "" if until is None else f", lease until {until:%H:%M:%SZ}"


def build_server(make_client: Callable[[], AsyncClient]) -> MCPServer[Any]:
    """The stdio MCP server of one agent; `make_client` builds the SDK client on first use."""
    session = Session(make_client)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await session.close()

    return build_tools(lambda _: session, lifespan)


SessionFor = Callable[[Context], Session]
Lifespan = Callable[[MCPServer[Any]], Any]


def build_tools(session_for: SessionFor, lifespan: Lifespan) -> MCPServer[Any]:
    """The MCP server and its tools; each call acts through the `Session` of its caller."""
    server: MCPServer[Any] = MCPServer(
        "work-ledger", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )

    @server.tool(structured_output=False)
    async def claim(
        ctx: Context,
        unit: Annotated[
            str | None, Field(description="Claim this unit; omit for the next.")
        ] = None,
        domain: Annotated[str | None, Field(description="Only from this domain.")] = None,
        wait_seconds: Annotated[int, Field(ge=0, le=60, description="Wait for one.")] = 0,
    ) -> CallToolResult:
        """Claim the next unit of work (or a named one) and start it (state in_progress).
        Call this to get work; you hold one unit at a time (asking again returns it)."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.client.claim_work(
                domain=domain, unit=unit, wait_seconds=wait_seconds or None
            )
            await session.hold(work)
            again = " (you already held it)" if work.resumed else ""
            return (
                f"Claimed unit {work.unit.external_ref}{again}: id {work.unit.id}, attempt "
                f"{work.attempt.attempt_no}, state {work.unit.state}{_lease(work)}. Do the work; "
                "then verify with an evidence link and dispose MIGRATED."
            )

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def heartbeat(ctx: Context, unit: UnitRef = None) -> CallToolResult:
        """Renew the lease now. Rarely needed: this server heartbeats in the background.
        Use it to check that your claim is still live."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            await work.heartbeat()
            return f"Claim on {work.unit.external_ref} is live{_lease(work)}."

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def record_cost(
        ctx: Context,
        cost_cents: Annotated[int, Field(gt=0, description="Cents spent since the last call.")],
        unit: UnitRef = None,
    ) -> CallToolResult:
        """Add money spent on the unit (whole cents) to your attempt. Call as you spend."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            step = await work.cost(cost_cents)
            return (
                f"Recorded {cost_cents} cents; unit {step.unit.external_ref} has cost "
                f"{step.unit.cost_cents} cents so far."
            )

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def ask(
        ctx: Context,
        question: Annotated[
            str | None, Field(description="The question; omit to keep waiting.")
        ] = None,
        unit: UnitRef = None,
        wait_seconds: Annotated[int, Field(ge=0, le=600, description="How long to wait.")] = 50,
    ) -> CallToolResult:
        """Block the unit on a question only a human can answer, and wait for the answer.
        The lease pauses meanwhile. If no answer comes in time, call ask again without
        a question to keep waiting."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            if question is not None:
                open_question = await work.block(question)
            else:
                found = (await work.refresh()).open_question
                if found is None:
                    raise Refusal(
                        f"no_open_question: unit {work.unit.external_ref} has no open question; "
                        "pass `question` to ask one"
                    )
                open_question = found
            got = await work.wait_for_answer(open_question.id, timeout=wait_seconds)
            if got.status == "answered":
                return f"Answer: {got.answer}\nUnit {work.unit.external_ref} is in_progress again."
            if got.status == "cancelled":
                return (
                    f"The question was withdrawn without an answer; unit "
                    f"{work.unit.external_ref} is in_progress again. Go on, or release it."
                )
            return (
                f"No answer yet (question {got.id} is open; unit {work.unit.external_ref} stays "
                "blocked). Call ask again without a question to keep waiting, or dispose DEFERRED."
            )

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def verify(
        ctx: Context,
        evidence_url: Annotated[str, Field(description="http(s) link to the evidence.")],
        unit: UnitRef = None,
    ) -> CallToolResult:
        """Mark your in_progress unit verified, with a link to where its evidence lives
        (CI run, pull request). Then call dispose MIGRATED."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            await work.verify(evidence_url)
            return f"Unit {work.unit.external_ref} is verified. Next: dispose MIGRATED."

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def dispose(
        ctx: Context,
        disposition: Annotated[
            Literal["MIGRATED", "DROPPED", "DEFERRED", "DEAD"],
            Field(
                description="MIGRATED once verified; DROPPED/DEAD in progress; DEFERRED blocked."
            ),
        ],
        reason: Annotated[str | None, Field(description="Why, in a sentence.")] = None,
        unit: UnitRef = None,
    ) -> CallToolResult:
        """Close the unit for good: MIGRATED after verify; DROPPED (not needed) or DEAD
        (cannot be done) while in progress; DEFERRED or DEAD while blocked."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            closed = await work.dispose(disposition, reason=reason)
            await session.drop(work)
            return f"Unit {closed.external_ref} is {closed.state} ({disposition}). Claim the next."

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def release(
        ctx: Context,
        outcome: Annotated[
            Literal["failed", "abandoned"], Field(description="failed: you tried and failed.")
        ] = "failed",
        reason: Annotated[str | None, Field(description="Why, in a sentence.")] = None,
        unit: UnitRef = None,
    ) -> CallToolResult:
        """Give the unit back (ready) so another attempt can take it. Use when you cannot
        finish; use dispose instead when the unit should never be tried again."""
        session = session_for(ctx)

        async def run() -> str:
            work = await session.work_for(unit)
            await work.release(outcome=outcome, reason=reason)
            await session.drop(work)
            return f"Released {work.unit.external_ref} (attempt {outcome}). Claim another unit."

        return await session.guard(run())

    @server.tool(structured_output=False)
    async def show(ctx: Context, unit: UnitRef = None) -> CallToolResult:
        """Show a unit: state, holder, lease, cost, evidence, attempts and questions."""
        session = session_for(ctx)

        async def run() -> str:
            ref = unit or (await session.work_for(None)).unit.id
            detail = await session.client.get_unit(ref)
            return json.dumps(to_json(detail), separators=(",", ":"))

        return await session.guard(run())

    return server
