"""Questions on the write side (DESIGN §4): block a unit with a question, answer it
(unblock), or withdraw it (cancel); a base of `Ledger`. The question's routing and
listing are the triage service's (triage.py and the reads)."""

from __future__ import annotations

import uuid

import asyncpg

from work_ledger.db.store import Store
from work_ledger.domain import input_rules, refusals
from work_ledger.domain.model import NEXT_ACTIONS, Actor, Question, QuestionStatus, State, Unit
from work_ledger.errors import InvariantViolation, NotHolder
from work_ledger.service.reads import LedgerReads


class QuestionWrites(LedgerReads):
    """Block, unblock and cancel; a base of `Ledger`."""

    store: Store
    lease_seconds: int

    async def block(
        self,
        unit_ref: str,
        actor: Actor,
        question: str,
        *,
        assignee_group_slug: str = "agent-questions",
        attempt_id: uuid.UUID | None = None,
    ) -> tuple[Unit, Question]:
        """in_progress → blocked with a question; the lease pauses until the answer."""
        unit_id = await self.resolve(unit_ref)
        row = await self.store.fetchrow(
            "block_unit",
            unit_id,
            actor.holder,
            attempt_id,
            question,
            assignee_group_slug,
            actor.name,
        )
        if row is None:
            raise await self._refused(unit_id, actor, "block", [State.IN_PROGRESS], attempt_id)
        return Unit.from_record(row["unit"]), Question.from_record(row["question"])

    async def unblock(
        self,
        unit_ref: str,
        answer: str,
        actor: Actor,
        *,
        question_id: uuid.UUID | None = None,
        lease_seconds: int | None = None,
    ) -> tuple[Unit, Question]:
        """blocked → in_progress: answer the open question; the holder's lease restarts.
        waiting → ready for a unit parked at its attempt limit: it may be tried
        max_attempts times more."""
        unit_id = await self.resolve(unit_ref)
        row = await self._resume(unit_id, question_id, answer, actor, lease_seconds, None)
        return Unit.from_record(row["unit"]), Question.from_record(row["question"])

    async def cancel_question(
        self, question_id: uuid.UUID, actor: Actor, *, reason: str | None = None
    ) -> Question:
        """Withdraw an open question; its blocked unit goes back to in_progress."""
        question = await self.get_question(question_id)
        if question.status is not QuestionStatus.OPEN:
            raise InvariantViolation(
                f"question {question_id} is already {question.status}; only an open question "
                "can be cancelled",
                invariant="question_status_final",
                unit_id=str(question.unit_id),
            )
        unit = await self.get_unit(str(question.unit_id))
        if not actor.privileged and unit.unit.claimed_by != actor.name:
            raise NotHolder(
                f"question {question_id} belongs to unit {unit.unit.external_ref}, held by "
                f"{unit.unit.claimed_by}; only its holder or an operator may cancel it",
                unit_id=str(unit.unit.id),
                state=unit.unit.state,
                allowed=NEXT_ACTIONS[unit.unit.state],
            )
        row = await self._resume(None, question_id, None, actor, None, reason)
        return Question.from_record(row["question"])

    async def _resume(
        self,
        unit_id: uuid.UUID | None,
        question_id: uuid.UUID | None,
        answer: str | None,
        actor: Actor,
        lease_seconds: int | None,
        reason: str | None,
    ) -> asyncpg.Record:
        lease = input_rules.lease(lease_seconds, self.lease_seconds)
        args = (unit_id, question_id, answer, actor.name, lease, reason)
        try:
            row = await self.store.fetchrow("resume_blocked_unit", *args)
        except InvariantViolation as exc:
            if exc.invariant != "one_live_claim_per_agent":
                raise
            raise await self._holder_busy(unit_id, question_id) from exc
        if row is not None:
            return row
        if unit_id is None:
            question = await self.get_question(question_id)  # type: ignore[arg-type]
            unit_id = question.unit_id
        unit, _ = await self._look(unit_id)
        if unit.state is State.WAITING and answer is not None:
            # Parked at its attempt limit: the answer allows max_attempts more.
            parked = await self.store.fetchrow(
                "answer_parked_unit", unit_id, question_id, answer, actor.name
            )
            if parked is not None:
                return parked
        if unit.state is State.BLOCKED:
            raise refusals.not_the_open_question(unit, question_id)
        raise refusals.wrong_state(unit, "unblock", [State.BLOCKED])
