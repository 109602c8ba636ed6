"""Attempts: heartbeat (extend the lease) and cost."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from work_ledger.api import problems
from work_ledger.api.deps import (
    Caller,
    IdempotentRoute,
    ledger,
    require,
    unit_logged,
)
from work_ledger.api.direct import direct
from work_ledger.api.schemas import (
    UNIT_ATTEMPT_JSON,
    AttemptOut,
    CostIn,
    LeaseIn,
    UnitAttempt,
    UnitAttemptOut,
    UnitOut,
)
from work_ledger.api.wire import answer_as, body_doc, json_body
from work_ledger.domain.shape import CostRecord
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

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


@router.post(
    "/attempts/{attempt_id}/heartbeat",
    response_model=UnitAttemptOut,
    openapi_extra=body_doc(LeaseIn),
)
@direct
async def heartbeat(
    request: Request, attempt_id: uuid.UUID, svc: LedgerDep, caller: Agent
) -> Response:
    """Extend the lease of your live attempt; 409 attempt_superseded means stop working."""
    body = await json_body(request, LeaseIn)
    unit, attempt = await svc.heartbeat(
        attempt_id, caller.actor(), lease_seconds=body.lease_seconds
    )
    unit_logged(request, unit.id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(unit, attempt))


@router.post(
    "/attempts/{attempt_id}/cost", response_model=AttemptUnitOut, openapi_extra=body_doc(CostIn)
)
@direct
async def record_cost(
    request: Request, attempt_id: uuid.UUID, svc: LedgerDep, caller: Agent
) -> Response:
    """Record cost against an attempt: cents, and optionally the model and its tokens (each
    record is kept; the attempt's and unit's cost_cents are their sums). Recorded even
    after the attempt ended, and past a spent budget."""
    body = await json_body(request, CostIn)
    record = CostRecord(**body.model_dump())
    unit, attempt = await svc.record_cost(attempt_id, record, caller.actor())
    unit_logged(request, unit.id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(unit, attempt))
