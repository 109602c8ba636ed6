"""Units: register, transition, block, unblock, dispose, list and show (claims: claims.py)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from work_ledger.api import problems
from work_ledger.api.auth import Caller, Reader, refuse_role, require
from work_ledger.api.request_state import ledger, unit_logged
from work_ledger.api.schemas import (
    MAX_LIMIT,
    UNIT_ATTEMPT_JSON,
    UNIT_ONLY_JSON,
    UNIT_QUESTION_JSON,
    BlockIn,
    DisposeIn,
    DisposeOut,
    RegisteredOut,
    RegisterIn,
    RegisterOut,
    TransitionIn,
    UnblockIn,
    UnitAttempt,
    UnitAttemptOut,
    UnitDetailOut,
    UnitOnly,
    UnitOut,
    UnitPage,
    UnitQuestion,
    UnitQuestionOut,
)
from work_ledger.api.wire import answer, answer_as, body_doc, body_of
from work_ledger.api.writes import WritesDep
from work_ledger.domain.model import (
    Attempt,
    Disposition,
    NewUnit,
    Outcome,
    Question,
    Registered,
    State,
    Unit,
)
from work_ledger.errors import InvalidInput
from work_ledger.service.keyed import Keying
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

router = APIRouter(tags=["units"], responses=problems.READ_RESPONSES)
UnitRef = Annotated[
    str,
    Path(min_length=1, max_length=256, description="The unit's id (uuid) or its external_ref."),
]
LedgerDep = Annotated[Ledger, Depends(ledger)]
Agent = Annotated[Caller, Depends(require(Role.AGENT))]
AgentOrHarness = Annotated[Caller, Depends(require(Role.AGENT, Role.HARNESS))]


def _unit_attempt(request: Request, result: tuple[Unit, Attempt]) -> Response:
    unit_logged(request, result[0].id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(*result))


def _unit_question(request: Request, result: tuple[Unit, Question], status: int = 200) -> Response:
    unit_logged(request, result[0].id)
    return answer_as(UNIT_QUESTION_JSON, UnitQuestion(*result), status)


@router.post(
    "/units",
    responses=problems.WRITE_RESPONSES,
    response_model=RegisterOut,
    openapi_extra=body_doc(RegisterIn),
)
async def register_units(
    writes: WritesDep,
    caller: Annotated[Caller, Depends(require())],
    body: Annotated[RegisterIn, Depends(body_of(RegisterIn))],
) -> Response:
    """Register a batch of units (operator). Known external_refs are left as they are."""
    units = [NewUnit(u.external_ref, u.fleet, u.domain, u.workflow_id) for u in body.units]

    def registered_out(registered: list[Registered]) -> Response:
        created = sum(1 for r in registered if r.created)
        return answer(
            RegisterOut(
                created=created,
                existing=len(registered) - created,
                units=[RegisteredOut.model_validate(r) for r in registered],
            )
        )

    return await writes.run(
        Keying.ATOMIC, lambda svc: svc.register(units, caller.actor()), registered_out
    )


@router.post(
    "/units/{unit:path}/transition",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitAttemptOut,
    openapi_extra=body_doc(TransitionIn),
)
async def transition(
    request: Request,
    unit: UnitRef,
    writes: WritesDep,
    caller: AgentOrHarness,
    body: Annotated[TransitionIn, Depends(body_of(TransitionIn))],
) -> Response:
    """Start (`to: in_progress`), verify (`to: verified` with `evidence_url`) or release
    (`to: ready`, `outcome` failed or abandoned) a unit you hold."""
    if body.to != "verified":
        refuse_role(caller, Role.HARNESS, f"move a unit to {body.to}; a harness only verifies")
    if body.to == "verified":
        if body.evidence_url is None:
            raise InvalidInput(
                "to verify a unit, send evidence_url: an http(s) link to the passing run",
                invariant="unit_evidence_is_link",
            )
        if body.outcome is not None:
            raise InvalidInput("outcome applies to a release (to: ready) only; drop it")
        evidence_url = body.evidence_url

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.verify(
                unit,
                caller.actor(Role.HARNESS),
                evidence_url,
                attempt_id=body.attempt_id,
                reason=body.reason,
            )
    elif body.to == "in_progress":
        if body.evidence_url is not None or body.outcome is not None:
            raise InvalidInput("start takes no evidence_url or outcome; drop them")

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.start(unit, caller.actor(), attempt_id=body.attempt_id)
    else:
        if body.evidence_url is not None:
            raise InvalidInput("a release takes no evidence_url; drop it")

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.release(
                unit,
                caller.actor(),
                outcome=Outcome(body.outcome or "abandoned"),
                reason=body.reason,
                attempt_id=body.attempt_id,
            )

    return await writes.run(Keying.ATOMIC, write, lambda r: _unit_attempt(request, r))


@router.post(
    "/units/{unit:path}/block",
    status_code=201,
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestionOut,
    openapi_extra=body_doc(BlockIn),
)
async def block(
    request: Request,
    unit: UnitRef,
    writes: WritesDep,
    caller: AgentOrHarness,
    body: Annotated[BlockIn, Depends(body_of(BlockIn))],
) -> Response:
    """Block an in_progress unit on a question; its lease pauses until the answer."""
    return await writes.run(
        Keying.ATOMIC,
        lambda svc: svc.block(
            unit,
            caller.actor(Role.HARNESS),
            body.question,
            assignee_group_slug=body.assignee_group_slug,
            attempt_id=body.attempt_id,
        ),
        lambda r: _unit_question(request, r, 201),
    )


@router.post(
    "/units/{unit:path}/unblock",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestionOut,
    openapi_extra=body_doc(UnblockIn),
)
async def unblock(
    request: Request,
    unit: UnitRef,
    writes: WritesDep,
    caller: Annotated[Caller, Depends(require(Role.TRIAGE))],
    body: Annotated[UnblockIn, Depends(body_of(UnblockIn))],
) -> Response:
    """Answer a blocked unit's open question; the unit resumes in_progress for its holder."""
    return await writes.run(
        Keying.ATOMIC,
        lambda svc: svc.unblock(
            unit, body.answer, caller.actor(Role.TRIAGE), question_id=body.question_id
        ),
        lambda r: _unit_question(request, r),
    )


@router.post(
    "/units/{unit:path}/dispose",
    responses=problems.WRITE_RESPONSES,
    response_model=DisposeOut,
    openapi_extra=body_doc(DisposeIn),
)
async def dispose(
    request: Request,
    unit: UnitRef,
    writes: WritesDep,
    caller: Agent,
    body: Annotated[DisposeIn, Depends(body_of(DisposeIn))],
) -> Response:
    """Close a unit for good: MIGRATED (from verified), DROPPED, DEFERRED or DEAD."""

    def disposed(found: Unit) -> Response:
        unit_logged(request, found.id)
        return answer_as(UNIT_ONLY_JSON, UnitOnly(found))

    return await writes.run(
        Keying.ATOMIC,
        lambda svc: svc.dispose(
            unit,
            body.disposition,
            caller.actor(),
            evidence_url=body.evidence_url,
            reason=body.reason,
            attempt_id=body.attempt_id,
        ),
        disposed,
    )


@router.get("/units")
async def list_units(
    svc: LedgerDep,
    _: Reader,
    state: State | None = None,
    domain: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    fleet: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    disposition: Disposition | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> UnitPage:
    """Units oldest first, filtered; pass `next_cursor` back as `cursor` for the next page."""
    page = await svc.list_units(
        state=state,
        domain=domain,
        fleet=fleet,
        disposition=disposition,
        limit=limit,
        cursor=cursor,
    )
    return UnitPage.model_validate(
        {"items": page.items, "next_cursor": page.next_cursor}, from_attributes=True
    )


@router.get("/units/{unit:path}")
async def get_unit(request: Request, unit: UnitRef, svc: LedgerDep, _: Reader) -> UnitDetailOut:
    """One unit with its attempts and questions."""
    detail = await svc.get_unit(unit)
    unit_logged(request, detail.unit.id)
    data = UnitOut.model_validate(detail.unit).model_dump()
    return UnitDetailOut.model_validate(
        {**data, "attempts": detail.attempts, "questions": detail.questions},
        from_attributes=True,
    )
