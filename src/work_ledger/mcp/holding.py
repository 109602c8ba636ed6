"""The tools that take and hold a unit: claim, heartbeat, record_cost, show."""

from __future__ import annotations

import json
from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from work_ledger.client import to_json
from work_ledger.mcp.session import lease_text, session_of, tool

UnitRef = Annotated[
    str | None,
    Field(description="Unit id or external_ref; omit for the unit you hold."),
]


@tool
async def claim(
    ctx: Context,
    unit: Annotated[str | None, Field(description="Claim this unit; omit for the next.")] = None,
    domain: Annotated[str | None, Field(description="Only from this domain.")] = None,
    wait_seconds: Annotated[int, Field(ge=0, le=60, description="Wait for one.")] = 0,
) -> str:
    """Claim the next unit of work (or a named one) and start it (state in_progress).
    Call this to get work; you hold one unit at a time (asking again returns it)."""
    session = session_of(ctx)
    work = await session.client.claim_work(
        domain=domain, unit=unit, wait_seconds=wait_seconds or None
    )
    await session.hold(work)
    again = " (you already held it)" if work.resumed else ""
    return (
        f"Claimed unit {work.unit.external_ref}{again}: id {work.unit.id}, attempt "
        f"{work.attempt.attempt_no}, state {work.unit.state}{lease_text(work)}. Do the work; "
        "then verify with an evidence link and dispose MIGRATED."
    )


@tool
async def heartbeat(ctx: Context, unit: UnitRef = None) -> str:
    """Renew the lease now. Rarely needed: this server heartbeats in the background.
    Use it to check that your claim is still live."""
    work = await session_of(ctx).work_for(unit)
    await work.heartbeat()
    return f"Claim on {work.unit.external_ref} is live{lease_text(work)}."


@tool
async def record_cost(
    ctx: Context,
    cost_cents: Annotated[int, Field(gt=0, description="Cents spent since the last call.")],
    unit: UnitRef = None,
) -> str:
    """Add money spent on the unit (whole cents) to your attempt. Call as you spend."""
    work = await session_of(ctx).work_for(unit)
    step = await work.cost(cost_cents)
    return (
        f"Recorded {cost_cents} cents; unit {step.unit.external_ref} has cost "
        f"{step.unit.cost_cents} cents so far."
    )


@tool
async def show(ctx: Context, unit: UnitRef = None) -> str:
    """Show a unit: state, holder, lease, cost, evidence, attempts and questions."""
    session = session_of(ctx)
    ref = unit or (await session.work_for(None)).unit.id
    detail = await session.client.get_unit(ref)
    return json.dumps(to_json(detail), separators=(",", ":"))


TOOLS = (claim, heartbeat, record_cost, show)
