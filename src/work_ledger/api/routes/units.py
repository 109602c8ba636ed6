"""Units: register, transition, block, unblock, dispose, list and show (claims: claims.py)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import TypeAdapter

from work_ledger.api import problems
from work_ledger.api.answers import (
    RegisterOut,
    UnitAttempt,
    UnitDetailOut,
    UnitOnly,
    UnitPage,
    UnitQuestion,
)
from work_ledger.api.auth import Reader, refuse_role, token_doc
from work_ledger.api.request_state import ledger, unit_logged
from work_ledger.api.schemas import (
    MAX_LIMIT,
    BlockIn,
    DisposeIn,
    RegisterIn,
    TransitionIn,
    UnblockIn,
)
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
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


def _unit_attempt(request: Request, result: tuple[Unit, Attempt]) -> Response:
    unit_logged(request, result[0].id)
    return answer(UnitAttempt(*result))


def _unit_question(request: Request, result: tuple[Unit, Question], status: int = 200) -> Response:
    unit_logged(request, result[0].id)
    return answer(UnitQuestion(*result), status)


REGISTER_UNITS = WriteOf(RegisterIn)


@router.post(
    "/units",
    responses=problems.WRITE_RESPONSES,
    response_model=RegisterOut,
    openapi_extra=REGISTER_UNITS.doc(),
    operation_id="registerUnits",
)
async def register_units(request: Request) -> Response:
    """Register a batch of units (operator). Known external_refs are left as they are.

    A unit whose `requires` lists an unfinished unit is registered `waiting`; it becomes
    ready by itself when the last one finishes (done, or DROPPED)."""
    w = await REGISTER_UNITS(request)
    units = [
        NewUnit(
            u.external_ref,
            u.fleet,
            u.domain,
            u.workflow_id,
            requires=tuple(u.requires),
            max_attempts=u.max_attempts,
            exclusive=tuple(u.exclusive),
        )
        for u in w.body.units
    ]

    def registered_out(registered: list[Registered]) -> Response:
        created = sum(1 for r in registered if r.created)
        return answer(
            RegisterOut(
                created=created,
                existing=len(registered) - created,
                units=registered,
            )
        )

    return await w.run(
        Keying.ATOMIC, lambda svc: svc.register(units, w.caller.actor()), registered_out
    )


TRANSITION = WriteOf(TransitionIn, Role.AGENT, Role.HARNESS)


@router.post(
    "/units/{unit:path}/transition",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitAttempt,
    openapi_extra=TRANSITION.doc(),
    operation_id="transitionUnit",
)
async def transition(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Start (`to: in_progress`), verify (`to: verified` with `evidence_url`) or release
    (`to: ready`, `outcome` failed or abandoned) a unit you hold."""
    w = await TRANSITION(request)
    if w.body.to != "verified":
        refuse_role(w.caller, Role.HARNESS, f"move a unit to {w.body.to}; a harness only verifies")
    if w.body.to == "verified":
        if w.body.evidence_url is None:
            raise InvalidInput(
                "to verify a unit, send evidence_url: an http(s) link to the passing run",
                invariant="unit_evidence_is_link",
            )
        if w.body.outcome is not None:
            raise InvalidInput("outcome applies to a release (to: ready) only; drop it")
        evidence_url = w.body.evidence_url

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.verify(
                unit,
                w.caller.actor(Role.HARNESS),
                evidence_url,
                attempt_id=w.body.attempt_id,
                reason=w.body.reason,
            )
    elif w.body.to == "in_progress":
        if w.body.evidence_url is not None or w.body.outcome is not None:
            raise InvalidInput("start takes no evidence_url or outcome; drop them")

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.start(unit, w.caller.actor(), attempt_id=w.body.attempt_id)
    else:
        if w.body.evidence_url is not None:
            raise InvalidInput("a release takes no evidence_url; drop it")

        def write(svc: Ledger) -> Awaitable[tuple[Unit, Attempt]]:
            return svc.release(
                unit,
                w.caller.actor(),
                outcome=Outcome(w.body.outcome or "abandoned"),
                reason=w.body.reason,
                attempt_id=w.body.attempt_id,
            )

    return await w.run(Keying.ATOMIC, write, lambda r: _unit_attempt(request, r))


BLOCK = WriteOf(BlockIn, Role.AGENT, Role.HARNESS)


@router.post(
    "/units/{unit:path}/block",
    status_code=201,
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestion,
    openapi_extra=BLOCK.doc(),
    operation_id="blockUnit",
)
async def block(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Block an in_progress unit on a question; its lease pauses until the answer."""
    w = await BLOCK(request)
    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.block(
            unit,
            w.caller.actor(Role.HARNESS),
            w.body.question,
            assignee_group_slug=w.body.assignee_group_slug,
            attempt_id=w.body.attempt_id,
        ),
        lambda r: _unit_question(request, r, 201),
    )


UNBLOCK = WriteOf(UnblockIn, Role.TRIAGE)


@router.post(
    "/units/{unit:path}/unblock",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestion,
    openapi_extra=UNBLOCK.doc(),
    operation_id="unblockUnit",
)
async def unblock(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Answer a blocked unit's open question; the unit resumes in_progress for its holder."""
    w = await UNBLOCK(request)
    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.unblock(
            unit, w.body.answer, w.caller.actor(Role.TRIAGE), question_id=w.body.question_id
        ),
        lambda r: _unit_question(request, r),
    )


DISPOSE = WriteOf(DisposeIn, Role.AGENT)


@router.post(
    "/units/{unit:path}/dispose",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitOnly,
    openapi_extra=DISPOSE.doc(),
    operation_id="disposeUnit",
)
async def dispose(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Close a unit for good: MIGRATED (from verified), DROPPED, DEFERRED or DEAD."""
    w = await DISPOSE(request)

    def disposed(found: Unit) -> Response:
        unit_logged(request, found.id)
        return answer(UnitOnly(found))

    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.dispose(
            unit,
            w.body.disposition,
            w.caller.actor(),
            evidence_url=w.body.evidence_url,
            reason=w.body.reason,
            attempt_id=w.body.attempt_id,
        ),
        disposed,
    )


@router.get("/units", operation_id="listUnits", openapi_extra=token_doc())
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
    return UnitPage(items=page.items, next_cursor=page.next_cursor)


@router.get(
    "/units/{unit:path}",
    operation_id="getUnit",
    response_model=UnitDetailOut,
    openapi_extra=token_doc(),
)
async def get_unit(request: Request, unit: UnitRef, svc: LedgerDep, _: Reader) -> Response:
    """One unit with its attempts (each with its cost by model) and questions, what it
    waits on, its requirements, parent, children and the cost of its whole subtree, and
    for a ready unit what keeps a claim from it now (`held_back_by`)."""
    detail = await svc.get_unit(unit)
    unit_logged(request, detail.unit.id)
    shape = await svc.unit_shape(detail.unit.id)
    by_attempt = shape.pop("cost_by_model")
    attempts = [
        {**_fields(attempt), "cost_by_model": by_attempt.get(str(attempt.id), [])}
        for attempt in detail.attempts
    ]
    found = {
        **_fields(detail.unit),
        **shape,
        "attempts": attempts,
        "questions": detail.questions,
        "held_back_by": await svc.held_back_by(detail.unit),
    }
    return answer(_DETAIL.validate_python(found))


def _fields(record: Unit | Attempt) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


_DETAIL = TypeAdapter(UnitDetailOut)
