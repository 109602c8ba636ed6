"""Attempts: heartbeat (extend the lease) and cost."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from work_ledger.api import problems
from work_ledger.api.auth import Caller, require
from work_ledger.api.request_state import unit_logged
from work_ledger.api.schemas import (
    UNIT_ATTEMPT_JSON,
    AttemptOut,
    CostIn,
    LeaseIn,
    UnitAttempt,
    UnitAttemptOut,
    UnitOut,
)
from work_ledger.api.wire import answer_as, body_doc, body_of
from work_ledger.api.writes import WritesDep
from work_ledger.domain.model import Attempt, Unit
from work_ledger.service.keyed import Keying
from work_ledger.service.tokens import Role

router = APIRouter(tags=["attempts"], responses=problems.WRITE_RESPONSES)
Agent = Annotated[Caller, Depends(require(Role.AGENT))]


class AttemptUnitOut(UnitAttemptOut):
    """The attempt first: cost is recorded against it."""

    attempt: AttemptOut
    unit: UnitOut


def _unit_attempt(request: Request, result: tuple[Unit, Attempt]) -> Response:
    unit_logged(request, result[0].id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(*result))


@router.post(
    "/attempts/{attempt_id}/heartbeat",
    response_model=UnitAttemptOut,
    openapi_extra=body_doc(LeaseIn),
)
async def heartbeat(
    request: Request,
    attempt_id: uuid.UUID,
    writes: WritesDep,
    caller: Agent,
    body: Annotated[LeaseIn, Depends(body_of(LeaseIn))],
) -> Response:
    """Extend the lease of your live attempt; 409 attempt_superseded means stop working."""
    return await writes.run(
        Keying.ATOMIC,
        lambda svc: svc.heartbeat(attempt_id, caller.actor(), lease_seconds=body.lease_seconds),
        lambda result: _unit_attempt(request, result),
    )


@router.post(
    "/attempts/{attempt_id}/cost", response_model=AttemptUnitOut, openapi_extra=body_doc(CostIn)
)
async def record_cost(
    request: Request,
    attempt_id: uuid.UUID,
    writes: WritesDep,
    caller: Agent,
    body: Annotated[CostIn, Depends(body_of(CostIn))],
) -> Response:
    """Add spent cents to an attempt (and its unit); recorded even after the attempt ended."""
    return await writes.run(
        Keying.ATOMIC,
        lambda svc: svc.record_cost(attempt_id, body.cost_cents, caller.actor()),
        lambda result: _unit_attempt(request, result),
    )
