"""The tools that end an attempt: verify, dispose, release, split."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from work_ledger.client import NewChild
from work_ledger.mcp.holding import UnitRef
from work_ledger.mcp.session import session_of, tool

Reason = Annotated[str | None, Field(description="Why, in a sentence.")]


@tool
async def verify(
    ctx: Context,
    evidence_url: Annotated[str, Field(description="http(s) link to the evidence.")],
    unit: UnitRef = None,
) -> str:
    """Mark your in_progress unit verified, with a link to where its evidence lives
    (CI run, pull request). Then call dispose MIGRATED."""
    work = await session_of(ctx).work_for(unit)
    await work.verify(evidence_url)
    return f"Unit {work.unit.external_ref} is verified. Next: dispose MIGRATED."


@tool
async def dispose(
    ctx: Context,
    disposition: Annotated[
        Literal["MIGRATED", "DROPPED", "DEFERRED", "DEAD"],
        Field(description="MIGRATED once verified; DROPPED/DEAD in progress; DEFERRED blocked."),
    ],
    reason: Reason = None,
    unit: UnitRef = None,
) -> str:
    """Close the unit for good: MIGRATED after verify; DROPPED (not needed) or DEAD
    (cannot be done) while in progress; DEFERRED or DEAD while blocked."""
    session = session_of(ctx)
    work = await session.work_for(unit)
    closed = await work.dispose(disposition, reason=reason)
    await session.drop(work)
    return f"Unit {closed.external_ref} is {closed.state} ({disposition}). Claim the next."


@tool
async def release(
    ctx: Context,
    outcome: Annotated[
        Literal["failed", "abandoned"], Field(description="failed: you tried and failed.")
    ] = "failed",
    reason: Reason = None,
    unit: UnitRef = None,
) -> str:
    """Give the unit back (ready) so another attempt can take it. Use when you cannot
    finish; use dispose instead when the unit should never be tried again."""
    session = session_of(ctx)
    work = await session.work_for(unit)
    await work.release(outcome=outcome, reason=reason)
    await session.drop(work)
    return f"Released {work.unit.external_ref} (attempt {outcome}). Claim another unit."


@tool
async def split(
    ctx: Context,
    children: Annotated[
        list[str],
        Field(
            min_length=1,
            max_length=100,
            description="New external_refs, one per sub-unit small enough for one attempt.",
        ),
    ],
    in_order: Annotated[
        bool, Field(description="True: each child requires the one before it.")
    ] = False,
    reason: Reason = None,
    unit: UnitRef = None,
) -> str:
    """Use when the unit you hold is too big for one attempt: hand it back as smaller
    sub-units instead of failing or releasing it. Your attempt ends (outcome split); the
    children are registered for any agent to claim; the unit waits until they finish, then
    comes back ready to be integrated, verified and disposed."""
    session = session_of(ctx)
    work = await session.work_for(unit)
    wanted: list[NewChild | str] = list(children)
    if in_order:
        wanted = [
            NewChild(ref, requires=tuple(children[i - 1 : i])) for i, ref in enumerate(children)
        ]
    done = await work.split(wanted, reason=reason)
    await session.drop(work)
    refs = ", ".join(c.external_ref for c in done.children)
    return (
        f"Split {done.unit.external_ref} into {len(done.children)} units: {refs}. It is "
        f"{done.unit.state} until they finish. Claim the next unit (perhaps one of them)."
    )


TOOLS = (verify, dispose, release, split)
