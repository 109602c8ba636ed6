"""The ledger's reads: a unit with its history, pages of units, events and questions, the
audit, and the look a refused write takes at its unit to say which rule refused it and what
the caller may do next. `ShapeWrites` (service/shape.py) and `BudgetWrites`
(service/budgets.py) build on these, and `Ledger` (service/ledger.py) on both, adding the
claim and the attempt writes. The dashboard views are read apart, by readside/.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid

from work_ledger.db.store import Store
from work_ledger.domain import flow, keyset, refusals, shape
from work_ledger.domain.model import (
    HELD,
    Actor,
    Attempt,
    Disposition,
    Event,
    Outcome,
    Page,
    Question,
    QuestionStatus,
    State,
    Unit,
    UnitDetail,
    Violation,
)
from work_ledger.errors import InvalidInput, NotFound, WorkLedgerError


class LedgerReads:
    """The read use cases over a `Store`, and why a write was refused."""

    store: Store

    # -- why a write was refused ---------------------------------------------------------

    async def _refused(
        self,
        unit_id: uuid.UUID,
        actor: Actor,
        action: str,
        leaving: list[State],
        attempt_id: uuid.UUID | None,
        *,
        after_verify: bool = False,
    ) -> WorkLedgerError:
        unit, last = await self._look(unit_id)
        if attempt_id is not None:
            fenced_ok = (
                last is not None
                and last.id == attempt_id
                and (last.live or (after_verify and last.outcome is Outcome.VERIFIED))
            )
            if not fenced_ok:
                attempt = await self.store.fetchrow("attempt_and_unit", attempt_id)
                if attempt is None or attempt["unit"]["id"] != unit.id:
                    return NotFound(
                        f"attempt {attempt_id} is not an attempt of unit {unit.external_ref}"
                    )
                return refusals.superseded(unit, Attempt.from_record(attempt["attempt"]))
        if not actor.privileged:
            holder = unit.claimed_by if unit.state in HELD else (last.agent_id if last else None)
            if unit.state is State.READY or holder != actor.name:
                return refusals.not_holder(actor.name, action, unit, holder)
        return refusals.wrong_state(unit, action, leaving)

    async def _look(self, unit_id: uuid.UUID) -> tuple[Unit, Attempt | None]:
        row = await self.store.fetchrow("unit_and_last_attempt", unit_id)
        if row is None:
            raise NotFound(f"no unit {unit_id}; GET /units lists the registered units")
        attempt = None if row["attempt"] is None else Attempt.from_record(row["attempt"])
        return Unit.from_record(row["unit"]), attempt

    async def _claim_refused(self, unit_id: uuid.UUID, agent: str) -> WorkLedgerError:
        unit, _ = await self._look(unit_id)
        held = await self.store.fetchrow("unit_held_by", agent)
        other = None if held is None else Unit.from_record(held["unit"])
        if other is not None and other.id == unit_id:
            other = None
        if other is None:
            why = await self._shape_refusal(unit)
            if why is not None:
                return why
        return refusals.claim_refused(unit, agent, other)

    async def _shape_refusal(self, unit: Unit) -> WorkLedgerError | None:
        """Why DESIGN §12 and §13 keep this unit from a claim: it waits (on prerequisites,
        or on the ledger's question at its attempt limit), its budget is spent, its scope
        is paused or at its cap, or another unit holds one of its exclusion keys."""
        if unit.state is State.WAITING:
            row = await self.store.fetchrow("unit_shape", unit.id)
            waiting_on = [] if row is None else list(row["waiting_on"])
            if any(w["kind"] == "answer" for w in waiting_on):
                return shape.attempt_limit_reached(unit, waiting_on)
            return shape.prerequisites_unfinished(unit, waiting_on)
        lapsed = unit.lease_expires_at is not None and unit.lease_expires_at < dt.datetime.now(
            dt.UTC
        )
        if unit.state is State.READY or lapsed:
            budget = await self.store.fetchrow("exhausted_budget_of", unit.fleet, unit.domain)
            if budget is not None:
                return shape.budget_exhausted(unit, dict(budget))
            # A pause refuses a stale reclaim too, a cap only a ready unit (DESIGN §13).
            control = await self.store.fetchrow(
                "closed_control_of", unit.fleet, unit.domain, unit.state is State.READY
            )
            if control is not None:
                return flow.claim_held_back(unit, dict(control))
        if unit.state is State.READY:
            holders = await self.store.fetch("key_holders_of", unit.id)
            if holders:
                return flow.key_held(unit, dict(holders[0]))
        return None

    async def _attempt_refused(
        self, attempt_id: uuid.UUID, actor: Actor, action: str
    ) -> WorkLedgerError:
        row = await self.store.fetchrow("attempt_and_unit", attempt_id)
        if row is None:
            return NotFound(
                f"no attempt {attempt_id}; the attempt id comes from the claim response"
            )
        unit, attempt = Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])
        if not actor.privileged and attempt.agent_id != actor.name:
            return refusals.attempt_not_yours(actor.name, action, unit, attempt)
        return refusals.superseded(unit, attempt)

    async def _holder_busy(
        self, unit_id: uuid.UUID | None, question_id: uuid.UUID | None
    ) -> WorkLedgerError:
        if unit_id is None:
            unit_id = (await self.get_question(question_id)).unit_id  # type: ignore[arg-type]
        unit, _ = await self._look(unit_id)
        return refusals.holder_busy(unit)

    async def resolve(self, unit_ref: str) -> uuid.UUID:
        """A unit's id from its uuid or its external_ref (a uuid-shaped path is an id)."""
        with contextlib.suppress(ValueError):
            return uuid.UUID(unit_ref)
        row = await self.store.fetchrow("find_unit", unit_ref)
        if row is None:
            raise NotFound(
                f"no unit with id or external_ref {unit_ref!r}; "
                "GET /units lists the registered units"
            )
        unit_id: uuid.UUID = row["unit"]["id"]
        return unit_id

    async def get_unit(self, unit_ref: str) -> UnitDetail:
        unit_id = await self.resolve(unit_ref)
        row = await self.store.fetchrow("unit_with_history", unit_id)
        if row is None:
            raise NotFound(f"no unit {unit_ref!r}; GET /units lists the registered units")
        return UnitDetail(
            Unit.from_record(row["unit"]),
            [Attempt.from_record(a) for a in row["attempts"]],
            [Question.from_record(q) for q in row["questions"]],
        )

    async def list_units(
        self,
        *,
        state: State | None = None,
        domain: str | None = None,
        fleet: str | None = None,
        disposition: Disposition | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Unit]:
        keyset.check_page_limit(limit)
        after_time, after_id = keyset.decode(cursor)
        rows = await self.store.fetch(
            "list_units", state, domain, fleet, disposition, after_time, after_id, limit
        )
        units = [Unit.from_record(r["unit"]) for r in rows]
        last = units[-1] if len(units) == limit else None
        return Page(units, None if last is None else keyset.encode(last.created_at, last.id))

    async def list_events(
        self, *, unit_ref: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> Page[Event]:
        keyset.check_page_limit(limit)
        unit_id = None if unit_ref is None else await self.resolve(unit_ref)
        if unit_id is not None:
            await self._look(unit_id)
        after = None
        if cursor is not None:
            if not cursor.isdigit():
                raise InvalidInput(
                    f"cursor {cursor!r} is not one this ledger issued; drop it to start over"
                )
            after = int(cursor)
        rows = await self.store.fetch("list_events", unit_id, after, limit)
        events = [Event.from_record(r) for r in rows]
        return Page(events, str(events[-1].id) if len(events) == limit else None)

    async def list_questions(
        self,
        *,
        status: QuestionStatus | None = None,
        assignee_group_slug: str | None = None,
        routed: bool | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Question]:
        """Oldest first; `routed` False keeps those without an external_task_id (triage's
        to-do list), True those with one."""
        keyset.check_page_limit(limit)
        after_time, after_id = keyset.decode(cursor)
        rows = await self.store.fetch(
            "list_questions", status, assignee_group_slug, after_time, after_id, limit, routed
        )
        questions = [Question.from_record(r["question"]) for r in rows]
        last = questions[-1] if len(questions) == limit else None
        return Page(questions, None if last is None else keyset.encode(last.created_at, last.id))

    async def get_question(self, question_id: uuid.UUID) -> Question:
        row = await self.store.fetchrow("get_question", question_id)
        if row is None:
            raise NotFound(f"no question {question_id}; GET /questions lists them")
        return Question.from_record(row["question"])

    async def audit(self) -> list[Violation]:
        """Replay the event log and re-check every invariant; empty when the ledger is sound."""
        tx, _ = await self.store.begin("audit_begin")  # without JIT: audit.sql says why
        try:
            rows = await tx.store().fetch("audit_ledger")
        finally:
            await tx.end()
        return [Violation(r["unit_id"], r["external_ref"], r["rule"], r["detail"]) for r in rows]
