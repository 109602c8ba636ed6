"""Blocking questions: list (optionally waiting for one), show (optionally waiting for the
answer), cancel, route (triage)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from work_ledger.api import problems
from work_ledger.api.answers import QuestionPage
from work_ledger.api.auth import Reader, token_doc
from work_ledger.api.longpoll import Notifier
from work_ledger.api.request_state import ledger, unit_logged
from work_ledger.api.schemas import MAX_LIMIT, MAX_WAIT_SECONDS, CancelIn, RouteIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.domain.model import Question, QuestionStatus
from work_ledger.service.keyed import Keying
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role
from work_ledger.service.triage import route_question

router = APIRouter(tags=["questions"])
LedgerDep = Annotated[Ledger, Depends(ledger)]
Wait = Annotated[
    int,
    Query(ge=0, le=MAX_WAIT_SECONDS, description="Long-poll: wait up to this many seconds."),
]


@router.get(
    "/questions",
    responses=problems.READ_RESPONSES,
    operation_id="listQuestions",
    openapi_extra=token_doc(),
)
async def list_questions(
    request: Request,
    svc: LedgerDep,
    _: Reader,
    status: QuestionStatus | None = None,
    assignee_group_slug: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    routed: Annotated[
        bool | None,
        Query(description="false: only questions not yet routed to the human queue (triage)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    wait_seconds: Wait = 0,
) -> QuestionPage:
    """Questions oldest first; with `wait_seconds`, waits until at least one matches."""
    notifier: Notifier = request.app.state.notifier
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    while True:
        wake = notifier.questions_changed()
        page = await svc.list_questions(
            status=status,
            assignee_group_slug=assignee_group_slug,
            routed=routed,
            limit=limit,
            cursor=cursor,
        )
        remaining = deadline - loop.time()
        if page.items or remaining <= 0 or notifier.draining:
            return QuestionPage(items=page.items, next_cursor=page.next_cursor)
        await notifier.wait(wake, remaining)


@router.get(
    "/questions/{question_id}",
    responses=problems.READ_RESPONSES,
    operation_id="getQuestion",
    response_model=Question,
    openapi_extra=token_doc(),
)
async def get_question(
    request: Request, question_id: uuid.UUID, svc: LedgerDep, _: Reader, wait_seconds: Wait = 0
) -> Response:
    """One question; with `wait_seconds`, waits until it is answered or cancelled."""
    notifier: Notifier = request.app.state.notifier
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    async with notifier.question(str(question_id)) as closed:
        while True:
            question = await svc.get_question(question_id)
            remaining = deadline - loop.time()
            if question.status is not QuestionStatus.OPEN or remaining <= 0 or notifier.draining:
                unit_logged(request, question.unit_id)
                return answer(question)
            await notifier.wait(closed, remaining)


def _question_out(request: Request, question: Question) -> Response:
    unit_logged(request, question.unit_id)
    return answer(question)


CANCEL_QUESTION = WriteOf(CancelIn, Role.AGENT, Role.TRIAGE)


@router.post(
    "/questions/{question_id}/cancel",
    responses=problems.WRITE_RESPONSES,
    response_model=Question,
    openapi_extra=CANCEL_QUESTION.doc(),
    operation_id="cancelQuestion",
)
async def cancel_question(
    request: Request,
    question_id: uuid.UUID,
) -> Response:
    """Withdraw an open question (its holder, triage or an operator); the unit resumes."""
    w = await CANCEL_QUESTION(request)
    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.cancel_question(
            question_id, w.caller.actor(Role.TRIAGE), reason=w.body.reason
        ),
        lambda question: _question_out(request, question),
    )


ROUTE = WriteOf(RouteIn, Role.TRIAGE)


@router.post(
    "/questions/{question_id}/route",
    responses=problems.WRITE_RESPONSES,
    response_model=Question,
    openapi_extra=ROUTE.doc(),
    operation_id="routeQuestion",
)
async def route(
    request: Request,
    question_id: uuid.UUID,
) -> Response:
    """Record the human queue's item for an open question, once (the same id again: no-op)."""
    w = await ROUTE(request)
    return await w.run(
        Keying.ATOMIC,
        lambda svc: route_question(svc.store, question_id, w.body.external_task_id, w.caller.agent),
        lambda question: _question_out(request, question),
    )
