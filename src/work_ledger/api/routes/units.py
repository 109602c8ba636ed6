"""Units: register, claim (pull-next, long-poll, named), transition, block, unblock,
dispose, list and show."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from work_ledger.api import problems
from work_ledger.api.deps import (
    Caller,
    IdempotentRoute,
    Reader,
    ledger,
    refuse_role,
    require,
    unit_logged,
)
from work_ledger.api.direct import direct
from work_ledger.api.longpoll import Notifier
from work_ledger.api.schemas import (
    CLAIM_JSON,
    MAX_LIMIT,
    UNIT_ATTEMPT_JSON,
    UNIT_ONLY_JSON,
    UNIT_QUESTION_JSON,
    AttemptOut,
    BlockIn,
    ClaimIn,
    ClaimOut,
    DisposeIn,
    DisposeOut,
    LeaseIn,
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
from work_ledger.api.wire import answer, answer_as, body_doc, json_body
from work_ledger.domain.model import Claim, Disposition, NewUnit, Outcome, State
from work_ledger.errors import InvalidInput
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

router = APIRouter(
    tags=["units"],
    route_class=IdempotentRoute,
    responses=problems.READ_RESPONSES,
)
UnitRef = Annotated[
    str,
    Path(min_length=1, max_length=256, description="The unit's id (uuid) or its external_ref."),
]
LedgerDep = Annotated[Ledger, Depends(ledger)]
Agent = Annotated[Caller, Depends(require(Role.AGENT))]
AgentOrHarness = Annotated[Caller, Depends(require(Role.AGENT, Role.HARNESS))]


@router.post(
    "/units",
    responses=problems.WRITE_RESPONSES,
    response_model=RegisterOut,
    openapi_extra=body_doc(RegisterIn),
)
@direct
async def register_units(
    request: Request, svc: LedgerDep, caller: Annotated[Caller, Depends(require())]
) -> Response:
    """Register a batch of units (operator). Known external_refs are left as they are.

    A unit whose `requires` lists an unfinished unit is registered `waiting`; it becomes
    ready by itself when the last one finishes (done, or DROPPED)."""
    body = await json_body(request, RegisterIn)
    units = [
        NewUnit(
            u.external_ref,
            u.fleet,
            u.domain,
            u.workflow_id,
            requires=tuple(u.requires),
            max_attempts=u.max_attempts,
        )
        for u in body.units
    ]
    registered = await svc.register(units, caller.actor())
    created = sum(1 for r in registered if r.created)
    return answer(
        RegisterOut(
            created=created,
            existing=len(registered) - created,
            units=[RegisteredOut.model_validate(r) for r in registered],
        )
    )


def _claim_out(request: Request, claim: Claim) -> Response:
    if claim.unit is not None:
        unit_logged(request, claim.unit.id)
    return answer_as(CLAIM_JSON, claim)


@router.post(
    "/units/claim",
    responses=problems.WRITE_RESPONSES,
    response_model=ClaimOut,
    openapi_extra=body_doc(ClaimIn),
)
@direct
async def claim_next(request: Request, svc: LedgerDep, caller: Agent) -> Response:
    """Claim the oldest claimable unit, or get back the one you hold (`resumed`).

    With `wait_seconds`, waits until a unit becomes claimable; `unit` is null when none
    did in time. Use the returned `attempt.id` for heartbeats, cost and fencing."""
    body = await json_body(request, ClaimIn)
    if body.wait_seconds == 0:
        # No long-poll: no place in the waiters' queue either (a claim that will not wait
        # needs no turn, and a wake-up meant for a waiter never lands on it).
        claim = await svc.claim(caller.agent, domain=body.domain, lease_seconds=body.lease_seconds)
        return _claim_out(request, claim)
    notifier: Notifier = request.app.state.notifier
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_seconds
    queue = notifier.claims(body.domain)
    while True:
        turn = queue.enter()  # queued before looking, so no wake-up is missed
        claimed = looking_again = False
        try:
            claim = await svc.claim(
                caller.agent, domain=body.domain, lease_seconds=body.lease_seconds
            )
            claimed = claim.unit is not None and not claim.resumed
            remaining = deadline - loop.time()
            if claim.unit is not None or remaining <= 0:
                return _claim_out(request, claim)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(turn), remaining)
            if await request.is_disconnected():  # never claim for a caller that has gone
                return _claim_out(request, Claim(None, None))
            looking_again = True
        finally:
            queue.leave(turn, claimed=claimed, looking_again=looking_again)


@router.post(
    "/units/{unit:path}/claim",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitAttemptOut,
    openapi_extra=body_doc(LeaseIn),
)
@direct
async def claim_named(request: Request, unit: UnitRef, svc: LedgerDep, caller: Agent) -> Response:
    """Claim this unit; 409 naming the holder and lease expiry if it is held or closed."""
    body = await json_body(request, LeaseIn)
    claim = await svc.claim_named(unit, caller.agent, lease_seconds=body.lease_seconds)
    # claim_named refuses (raises) rather than answer an empty claim.
    assert claim.unit is not None
    assert claim.attempt is not None
    unit_logged(request, claim.unit.id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(claim.unit, claim.attempt))


@router.post(
    "/units/{unit:path}/transition",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitAttemptOut,
    openapi_extra=body_doc(TransitionIn),
)
@direct
async def transition(
    request: Request, unit: UnitRef, svc: LedgerDep, caller: AgentOrHarness
) -> Response:
    """Start (`to: in_progress`), verify (`to: verified` with `evidence_url`) or release
    (`to: ready`, `outcome` failed or abandoned) a unit you hold."""
    body = await json_body(request, TransitionIn)
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
        result = await svc.verify(
            unit,
            caller.actor(Role.HARNESS),
            body.evidence_url,
            attempt_id=body.attempt_id,
            reason=body.reason,
        )
    elif body.to == "in_progress":
        if body.evidence_url is not None or body.outcome is not None:
            raise InvalidInput("start takes no evidence_url or outcome; drop them")
        result = await svc.start(unit, caller.actor(), attempt_id=body.attempt_id)
    else:
        if body.evidence_url is not None:
            raise InvalidInput("a release takes no evidence_url; drop it")
        result = await svc.release(
            unit,
            caller.actor(),
            outcome=Outcome(body.outcome or "abandoned"),
            reason=body.reason,
            attempt_id=body.attempt_id,
        )
    unit_logged(request, result[0].id)
    return answer_as(UNIT_ATTEMPT_JSON, UnitAttempt(*result))


@router.post(
    "/units/{unit:path}/block",
    status_code=201,
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestionOut,
    openapi_extra=body_doc(BlockIn),
)
@direct
async def block(
    request: Request, unit: UnitRef, svc: LedgerDep, caller: AgentOrHarness
) -> Response:
    """Block an in_progress unit on a question; its lease pauses until the answer."""
    body = await json_body(request, BlockIn)
    found, question = await svc.block(
        unit,
        caller.actor(Role.HARNESS),
        body.question,
        assignee_group_slug=body.assignee_group_slug,
        attempt_id=body.attempt_id,
    )
    unit_logged(request, found.id)
    return answer_as(UNIT_QUESTION_JSON, UnitQuestion(found, question), 201)


@router.post(
    "/units/{unit:path}/unblock",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitQuestionOut,
    openapi_extra=body_doc(UnblockIn),
)
@direct
async def unblock(
    request: Request,
    unit: UnitRef,
    svc: LedgerDep,
    caller: Annotated[Caller, Depends(require(Role.TRIAGE))],
) -> Response:
    """Answer a blocked unit's open question; the unit resumes in_progress for its holder."""
    body = await json_body(request, UnblockIn)
    found, question = await svc.unblock(
        unit, body.answer, caller.actor(Role.TRIAGE), question_id=body.question_id
    )
    unit_logged(request, found.id)
    return answer_as(UNIT_QUESTION_JSON, UnitQuestion(found, question))


@router.post(
    "/units/{unit:path}/dispose",
    responses=problems.WRITE_RESPONSES,
    response_model=DisposeOut,
    openapi_extra=body_doc(DisposeIn),
)
@direct
async def dispose(request: Request, unit: UnitRef, svc: LedgerDep, caller: Agent) -> Response:
    """Close a unit for good: MIGRATED (from verified), DROPPED, DEFERRED or DEAD."""
    body = await json_body(request, DisposeIn)
    found = await svc.dispose(
        unit,
        body.disposition,
        caller.actor(),
        evidence_url=body.evidence_url,
        reason=body.reason,
        attempt_id=body.attempt_id,
    )
    unit_logged(request, found.id)
    return answer_as(UNIT_ONLY_JSON, UnitOnly(found))


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
    """One unit with its attempts (each with its cost by model) and questions, what it
    waits on, its requirements, parent, children and the cost of its whole subtree."""
    detail = await svc.get_unit(unit)
    unit_logged(request, detail.unit.id)
    shape = await svc.unit_shape(detail.unit.id)
    data = UnitOut.model_validate(detail.unit).model_dump()
    by_attempt = shape.pop("cost_by_model")
    attempts = [
        {
            **AttemptOut.model_validate(a).model_dump(),
            "cost_by_model": by_attempt.get(str(a.id), []),
        }
        for a in detail.attempts
    ]
    return UnitDetailOut.model_validate(
        {**data, **shape, "attempts": attempts, "questions": detail.questions},
        from_attributes=True,
    )
