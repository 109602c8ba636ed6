"""The tools that take and hold a unit: claim, heartbeat, record_cost, show."""

from __future__ import annotations

import json
from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from work_ledger.client import AsyncWork, NothingToClaim, to_json
from work_ledger.mcp.explain import nothing_claimable
from work_ledger.mcp.session import Refusal, Session, lease_text, session_of, tool

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
    Call this to get work; you hold one unit at a time (asking again returns it). When
    nothing is claimable it says why: what units wait on, or a spent budget (then stop)."""
    session = session_of(ctx)
    try:
        work = await session.client.claim_work(
            domain=domain, unit=unit, wait_seconds=wait_seconds or None
        )
    except NothingToClaim:
        if unit is not None:
            raise
        work = await _ready_but_not_handed_out(session, domain)
    await session.hold(work)
    again = " (you already held it)" if work.resumed else ""
    return (
        f"Claimed unit {work.unit.external_ref}{again}: id {work.unit.id}, attempt "
        f"{work.attempt.attempt_no}, state {work.unit.state}{lease_text(work)}. "
        + await _its_place(session, work)
        + "Do the work; then verify with an evidence link and dispose MIGRATED."
    )


async def _its_place(session: Session, work: AsyncWork) -> str:
    """For a unit that is part of a split, what that means for the work: a parent comes
    back to be integrated, a child is one part of its parent. '' for any other unit."""
    if work.unit.parent_id is None and work.attempt.attempt_no < 2:
        return ""  # a fresh unit split from nothing: spare the read
    detail = await session.client.get_unit(work.unit.id)
    text = ""
    if detail.parent is not None:
        text += f"It is one part of {detail.parent.external_ref}, split from it. "
    if detail.children:
        parts = ", ".join(c.external_ref for c in detail.children)
        text += (
            f"It was split into {parts}, now finished: integrate their work and check the "
            "whole, rather than doing it again. "
        )
    return text


async def _ready_but_not_handed_out(session: Session, domain: str | None) -> AsyncWork:
    """Pull-next found nothing. A unit still ready is held back by a budget: claiming it by
    name gets the refusal naming the cap and the spend (or the unit, had it just come back).
    With none ready, the refusal names what the waiting units wait on."""
    ready = await session.client.list_units(state="ready", domain=domain, limit=1)
    if not ready.items:
        raise Refusal(await nothing_claimable(session.client, domain))
    return await session.client.claim_work(unit=ready.items[0].id)


@tool
async def heartbeat(ctx: Context, unit: UnitRef = None) -> str:
    """Renew the lease now. Rarely needed: this server heartbeats in the background.
    Use it to check that your claim is still live."""
    work = await session_of(ctx).work_for(unit)
    await work.heartbeat()
    return f"Claim on {work.unit.external_ref} is live{lease_text(work)}."


# Each token class as its name says; 0 when not known (a short schema: tools cost context).
Tokens = Annotated[int, Field(ge=0)]


@tool
async def record_cost(
    ctx: Context,
    cost_cents: Annotated[
        int, Field(ge=0, description="Cents spent since the last call (0: tokens only).")
    ],
    model: Annotated[str | None, Field(max_length=128, description="The model used.")] = None,
    input_tokens: Tokens = 0,
    output_tokens: Tokens = 0,
    cache_read_tokens: Tokens = 0,
    cache_write_tokens: Tokens = 0,
    estimated: Annotated[
        bool, Field(description="True: the cents are a list-price estimate, not a bill.")
    ] = False,
    unit: UnitRef = None,
) -> str:
    """Record money and tokens spent on the unit to your attempt, per model. Call as you
    spend. Always recorded, even past a budget's cap."""
    work = await session_of(ctx).work_for(unit)
    step = await work.cost(
        cost_cents,
        model=model,
        # 0 is "not known" here: left out of the record, as a server before DESIGN §12 wants.
        input_tokens=input_tokens or None,
        output_tokens=output_tokens or None,
        cache_read_tokens=cache_read_tokens or None,
        cache_write_tokens=cache_write_tokens or None,
        estimated=estimated,
    )
    what = f"{cost_cents} cents" + (f" of {model}" if model else "")
    return (
        f"Recorded {what}; unit {step.unit.external_ref} has cost "
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
