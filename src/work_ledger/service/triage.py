"""Triage's use case: route a blocking question into the human queue, once.

Triage long-polls the open questions nobody has routed yet (`GET /questions?status=open&
routed=false`), creates an item in the human queue for each, and records that item's id
here as the question's `external_task_id`. The database sets it once (trigger
`question_routed_once`), so of two triage workers routing one question exactly one
succeeds; the other is told the winner's id and closes the item it created. Routing the
same id again changes nothing. A question answered or cancelled before it was routed is
not routed (`question_routed_while_open`): nobody waits on it any more.
"""

from __future__ import annotations

import uuid

from work_ledger.db.store import Store
from work_ledger.domain.model import Question
from work_ledger.errors import InvalidInput, InvariantViolation, NotFound

MAX_EXTERNAL_TASK_ID = 256


async def route_question(
    store: Store, question_id: uuid.UUID, external_task_id: str, actor: str
) -> Question:
    """Record that `question_id` was routed as `external_task_id`; appends a `routed` event.

    Idempotent for the same id; another id, or a closed unrouted question, is refused."""
    if not 1 <= len(external_task_id) <= MAX_EXTERNAL_TASK_ID:
        raise InvalidInput(
            f"external_task_id must be 1..{MAX_EXTERNAL_TASK_ID} characters, not "
            f"{len(external_task_id)}: send the id of the item in the human queue"
        )
    row = await store.fetchrow("route_question", question_id, external_task_id, actor)
    if row is not None:
        return Question.from_record(row["question"])
    found = await store.fetchrow("get_question", question_id)
    if found is None:
        raise NotFound(
            f"no question {question_id}; GET /questions?status=open&routed=false lists the "
            "questions waiting to be routed"
        )
    question = Question.from_record(found["question"])
    if question.external_task_id == external_task_id:
        return question  # routed before with this id: nothing to do
    raise refused(question, external_task_id)


def refused(question: Question, external_task_id: str) -> InvariantViolation:
    """Why routing `question` as `external_task_id` changed nothing."""
    if question.external_task_id is not None:
        return InvariantViolation(
            f"question {question.id} is already routed as {question.external_task_id!r}; a "
            f"question is routed once. Keep that external task and close {external_task_id!r} "
            "if you created it for this question",
            invariant="question_routed_once",
            unit_id=str(question.unit_id),
            extra={"question_id": str(question.id), "external_task_id": question.external_task_id},
        )
    # Not routed, yet the guarded write found nothing: the question is closed (a question
    # never reopens, and a set external_task_id is never cleared).
    return InvariantViolation(
        f"question {question.id} is {question.status} and was never routed; only an open "
        f"question is routed. Nobody waits on it any more: close {external_task_id!r} if you "
        "created it for this question",
        invariant="question_routed_while_open",
        unit_id=str(question.unit_id),
        extra={"question_id": str(question.id), "question_status": question.status.value},
    )
