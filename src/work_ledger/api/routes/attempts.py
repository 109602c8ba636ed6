"""Attempts: heartbeat (extend the lease) and cost."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from work_ledger.api import problems
from work_ledger.api.answers import UnitAttempt
from work_ledger.api.request_state import unit_logged
from work_ledger.api.schemas import CostIn, LeaseIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.domain.model import Attempt, Unit
from work_ledger.domain.shape import CostRecord
from work_ledger.service.keyed import Keying
from work_ledger.service.tokens import Role

router = APIRouter(tags=["attempts"], responses=problems.WRITE_RESPONSES)


def _unit_attempt(request: Request, result: tuple[Unit, Attempt]) -> Response:
    unit_logged(request, result[0].id)
    return answer(UnitAttempt(*result))


HEARTBEAT = WriteOf(LeaseIn, Role.AGENT)


@router.post(
    "/attempts/{attempt_id}/heartbeat",
    response_model=UnitAttempt,
    openapi_extra=HEARTBEAT.doc(),
    operation_id="heartbeat",
)
async def heartbeat(
    request: Request,
    attempt_id: uuid.UUID,
) -> Response:
    """Extend the lease of your live attempt; 409 attempt_superseded means stop working."""
    w = await HEARTBEAT(request)
    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.heartbeat(attempt_id, w.caller.actor(), lease_seconds=w.body.lease_seconds),
        lambda result: _unit_attempt(request, result),
    )


RECORD_COST = WriteOf(CostIn, Role.AGENT)


@router.post(
    "/attempts/{attempt_id}/cost",
    response_model=UnitAttempt,
    openapi_extra=RECORD_COST.doc(),
    operation_id="recordCost",
)
async def record_cost(
    request: Request,
    attempt_id: uuid.UUID,
) -> Response:
    """Record cost against an attempt: cents, and optionally the model and its tokens (each
    record is kept; the attempt's and unit's cost_cents are their sums). Recorded even
    after the attempt ended, and past a spent budget."""
    w = await RECORD_COST(request)
    record = CostRecord(**w.body.model_dump())
    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.record_cost(attempt_id, record, w.caller.actor()),
        lambda result: _unit_attempt(request, result),
    )
