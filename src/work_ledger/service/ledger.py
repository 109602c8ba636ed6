"""The use cases of the ledger: one method per operation of DESIGN §4.

Each write is one named SQL statement, so one transaction and one round trip, that
guards the state it expects, changes the rows and appends its event. When the guard
refuses (zero rows), the ledger looks once at the unit to say which rule refused and what
the caller may do next; nothing was written.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from work_ledger.db.store import Store
from work_ledger.domain import input_rules, refusals

# Imported from here by the API and the Temporal ingest.
from work_ledger.domain.input_rules import MAX_BATCH as MAX_BATCH
from work_ledger.domain.input_rules import MAX_LEASE_SECONDS as MAX_LEASE_SECONDS
from work_ledger.domain.model import (
    NEXT_ACTIONS,
    Actor,
    Attempt,
    Claim,
    Disposition,
    Outcome,
    Question,
    QuestionStatus,
    State,
    Unit,
    states_disposable_as,
)
from work_ledger.domain.shape import CostRecord, check_cost_record
from work_ledger.errors import (
    InvalidInput,
    InvariantViolation,
    NotHolder,
)
from work_ledger.service.budgets import BudgetWrites
from work_ledger.service.bulk import BulkWrites
from work_ledger.service.controls import ControlWrites
from work_ledger.service.shape import ShapeWrites
from work_ledger.service.telemetry import TelemetryWrites

# The states start, verify and release leave (parameters of their statements, units.sql).
_STARTABLE = [State.CLAIMED]
_VERIFIABLE = [State.IN_PROGRESS]
_RELEASABLE = [State.CLAIMED, State.IN_PROGRESS]
# The admission triggers' refusals (0022): the claim's snapshot saw the scope open or the
# key free, and a concurrent claim that committed first took the slot or the key. The
# statement was refused whole; run again, it reads the ledger anew and skips that unit.
_LOST_TO_A_CONTROL = frozenset({"scope_paused", "scope_cap_reached", "exclusive_key_held"})
CONTROL_TRIES = 8


class Ledger(ShapeWrites, BudgetWrites, BulkWrites, ControlWrites, TelemetryWrites):
    """The ledger's use cases over a `Store`: the writes here, register, split and waive in
    `ShapeWrites`, budgets in `BudgetWrites`, bulk dispose and release in `BulkWrites`, flow
    controls in `ControlWrites`, Claude Code's telemetry in `TelemetryWrites`, the reads in
    `LedgerReads`."""

    def __init__(
        self,
        store: Store,
        *,
        lease_seconds: int = 900,
        evidence_prefixes: Sequence[str] = (),
        max_attempts: int = 5,
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.evidence_prefixes = tuple(evidence_prefixes)
        self.max_attempts = max_attempts

    def on(self, store: Store) -> Ledger:
        """The same use cases, their statements run by `store` (in a caller's transaction)."""
        return Ledger(
            store,
            lease_seconds=self.lease_seconds,
            evidence_prefixes=self.evidence_prefixes,
            max_attempts=self.max_attempts,
        )

    # -- claim ---------------------------------------------------------------------------

    async def claim(
        self, agent: str, *, domain: str | None = None, lease_seconds: int | None = None
    ) -> Claim:
        """Claim the next unit (or get back the one `agent` holds). Nothing claimable: empty.

        Most calls claim a ready unit; claim_next_unit does that with half of claim_unit's
        plan, and says when the caller holds a claim or a lease has lapsed, which only the
        full claim_unit handles (a second round trip, for resume and reclaim only)."""
        lease = self._lease(lease_seconds)
        for _ in range(CONTROL_TRIES):
            try:
                row = await self.store.fetchrow("claim_next_unit", agent, domain, lease)
                if row is None or not row["full"]:
                    return Claim(None, None) if row is None else self._to_claim(row)
                break
            except InvariantViolation as exc:
                # The same agent claimed twice at once and the other claim won: claim_unit
                # below finds that claim held and returns it, resumed.
                if exc.invariant == "one_live_claim_per_agent":
                    break
                if exc.invariant not in _LOST_TO_A_CONTROL:
                    raise
        else:
            # Lost every race for a slot or a key: nothing claimable for now.
            return Claim(None, None)
        row = await self._claim(agent, domain, lease, None)
        return Claim(None, None) if row is None else self._to_claim(row)

    async def claim_named(
        self, unit_ref: str, agent: str, *, lease_seconds: int | None = None
    ) -> Claim:
        unit_id = await self.resolve(unit_ref)
        row = await self._claim(agent, None, self._lease(lease_seconds), unit_id)
        if row is not None:
            return self._to_claim(row)
        raise await self._claim_refused(unit_id, agent)

    async def _claim(
        self, agent: str, domain: str | None, lease: int, unit_id: uuid.UUID | None
    ) -> asyncpg.Record | None:
        for _ in range(CONTROL_TRIES):
            try:
                return await self.store.fetchrow("claim_unit", agent, domain, lease, unit_id)
            except InvariantViolation as exc:
                if exc.invariant == "one_live_claim_per_agent":
                    # The same agent claimed twice at once and the other claim won: this
                    # one now finds that claim held and returns it, resumed.
                    return await self.store.fetchrow("claim_unit", agent, domain, lease, unit_id)
                if exc.invariant not in _LOST_TO_A_CONTROL:
                    raise
        # Lost every race for a slot or a key: a named claim is told why by its caller.
        return None

    def _to_claim(self, row: asyncpg.Record) -> Claim:
        return Claim(
            Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"]), row["resumed"]
        )

    # -- attempt writes ------------------------------------------------------------------

    async def heartbeat(
        self, attempt_id: uuid.UUID, actor: Actor, *, lease_seconds: int | None = None
    ) -> tuple[Unit, Attempt]:
        """Extend the lease of a live attempt (a blocked unit's lease stays paused)."""
        lease = self._lease(lease_seconds)
        row = await self.store.fetchrow("heartbeat_attempt", attempt_id, actor.holder, lease)
        if row is None:
            raise await self._attempt_refused(attempt_id, actor, "heartbeat")
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])

    async def heartbeat_agents(self, agents: Sequence[str]) -> list[str]:
        """Renew the live leases held by `agents`; the agents that held one."""
        if not agents:
            return []
        rows = await self.store.fetch("heartbeat_agents", list(agents), self.lease_seconds)
        return [row["claimed_by"] for row in rows]

    async def record_cost(
        self,
        attempt_id: uuid.UUID,
        cost_cents: int | CostRecord,
        actor: Actor,
    ) -> tuple[Unit, Attempt]:
        """Keep a cost record (cents, and optionally model and tokens) against an attempt;
        the attempt's and its unit's cost grow by its cents. Spent money is always
        recorded: against an ended attempt, and past a spent budget."""
        record = cost_cents if isinstance(cost_cents, CostRecord) else CostRecord(cost_cents)
        if record.includes_telemetry:
            return await self.record_result_cost(attempt_id, record, actor)
        check_cost_record(record)
        row = await self.store.fetchrow(
            "record_cost",
            attempt_id,
            record.cost_cents,
            actor.holder,
            actor.name,
            record.model,
            record.input_tokens,
            record.output_tokens,
            record.cache_read_tokens,
            record.cache_write_tokens,
            record.estimated,
        )
        if row is None:
            raise await self._attempt_refused(attempt_id, actor, "record cost for")
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])

    # -- unit writes ---------------------------------------------------------------------

    async def start(
        self, unit_ref: str, actor: Actor, *, attempt_id: uuid.UUID | None = None
    ) -> tuple[Unit, Attempt]:
        """claimed → in_progress."""
        unit_id = await self.resolve(unit_ref)
        args = (unit_id, _STARTABLE, actor.holder, attempt_id, actor.name)
        row = await self.store.fetchrow("start_unit", *args)
        if row is None:
            raise await self._refused(unit_id, actor, "start", _STARTABLE, attempt_id)
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])

    async def verify(
        self,
        unit_ref: str,
        actor: Actor,
        evidence_url: str,
        *,
        attempt_id: uuid.UUID | None = None,
        reason: str | None = None,
    ) -> tuple[Unit, Attempt]:
        """in_progress → verified with an evidence link; the attempt ends verified."""
        self.check_evidence(evidence_url)
        unit_id = await self.resolve(unit_ref)
        detail = {"reason": reason} if reason else {}
        args = (unit_id, _VERIFIABLE, actor.holder, attempt_id, evidence_url, detail, actor.name)
        row = await self.store.fetchrow("verify_unit", *args)
        if row is None:
            raise await self._refused(unit_id, actor, "verify", _VERIFIABLE, attempt_id)
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])

    async def release(
        self,
        unit_ref: str,
        actor: Actor,
        *,
        outcome: Outcome = Outcome.ABANDONED,
        reason: str | None = None,
        attempt_id: uuid.UUID | None = None,
    ) -> tuple[Unit, Attempt]:
        """claimed|in_progress → ready; the attempt ends failed or abandoned."""
        if outcome not in (Outcome.ABANDONED, Outcome.FAILED):
            raise InvalidInput(
                f"a release ends its attempt 'failed' or 'abandoned', not {outcome!r}"
            )
        unit_id = await self.resolve(unit_ref)
        detail = {"reason": reason} if reason else {}
        row = await self.store.fetchrow(
            "transition_unit",
            unit_id,
            State.READY,
            _RELEASABLE,
            actor.holder,
            attempt_id,
            None,
            outcome,
            "released",
            detail,
            actor.name,
        )
        if row is None:
            raise await self._refused(unit_id, actor, "release", _RELEASABLE, attempt_id)
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])

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
        lease = self._lease(lease_seconds)
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

    async def dispose(
        self,
        unit_ref: str,
        disposition: Disposition,
        actor: Actor,
        *,
        evidence_url: str | None = None,
        reason: str | None = None,
        attempt_id: uuid.UUID | None = None,
    ) -> Unit:
        """Close a unit for good: done (MIGRATED) or abandoned (DROPPED, DEFERRED, DEAD)."""
        if evidence_url is not None:
            self.check_evidence(evidence_url)
        unit_id = await self.resolve(unit_ref)
        leaving = states_disposable_as(disposition)
        if disposition is Disposition.MIGRATED:
            row = await self.store.fetchrow(
                "dispose_verified_unit",
                unit_id,
                actor.holder,
                attempt_id,
                evidence_url,
                reason,
                actor.name,
            )
        else:
            row = await self.store.fetchrow(
                "dispose_unit",
                unit_id,
                disposition,
                leaving,
                actor.holder,
                attempt_id,
                evidence_url,
                reason,
                actor.name,
            )
        if row is None:
            raise await self._refused(
                unit_id, actor, f"dispose {disposition}", leaving, attempt_id, after_verify=True
            )
        return Unit.from_record(row["unit"])

    # -- input rules shared by every caller -----------------------------------------------

    def _lease(self, lease_seconds: int | None) -> int:
        return input_rules.lease(lease_seconds, self.lease_seconds)

    def check_evidence(self, url: str) -> None:
        """Evidence is a bounded http(s) link, inside WL_EVIDENCE_ALLOWED_PREFIXES if set."""
        input_rules.check_evidence(url, self.evidence_prefixes)
