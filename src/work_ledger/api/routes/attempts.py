"""Attempts: heartbeat (extend the lease) and cost."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from work_ledger.api import problems
from work_ledger.api.deps import (
    Caller,
    IdempotentRoute,
    ledger,
    require,
    unit_logged,
)
from work_ledger.api.schemas import AttemptOut, CostIn, LeaseIn, UnitAttemptOut, UnitOut
from work_ledger.auth import Role
from work_ledger.service import Ledger

router = APIRouter(
    tags=["attempts"],
    route_class=IdempotentRoute,
    responses=problems.WRITE_RESPONSES,
)
LedgerDep = Annotated[Ledger, Depends(ledger)]
Agent = Annotated[Caller, Depends(require(Role.AGENT))]


class AttemptUnitOut(UnitAttemptOut):
    """The attempt first: cost is recorded against it."""

    attempt: AttemptOut
    unit: UnitOut


@router.post("/attempts/{attempt_id}/heartbeat")
async def heartbeat(
    request: Request, attempt_id: uuid.UUID, body: LeaseIn, svc: LedgerDep, caller: Agent
) -> UnitAttemptOut:
    """Extend the lease of your live attempt; 409 attempt_superseded means stop working."""
    unit, attempt = await svc.heartbeat(
        attempt_id, caller.actor(), lease_seconds=body.lease_seconds
    )
    unit_logged(request, unit.id)
    return UnitAttemptOut.model_validate({"unit": unit, "attempt": attempt}, from_attributes=True)


@router.post("/attempts/{attempt_id}/cost")
async def record_cost(
    request: Request, attempt_id: uuid.UUID, body: CostIn, svc: LedgerDep, caller: Agent
) -> AttemptUnitOut:
    """Add spent cents to an attempt (and its unit); recorded even after the attempt ended."""
    unit, attempt = await svc.record_cost(attempt_id, body.cost_cents, caller.actor())
    unit_logged(request, unit.id)
    return AttemptUnitOut.model_validate({"attempt": attempt, "unit": unit}, from_attributes=True)
