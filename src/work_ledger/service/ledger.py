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
from work_ledger.domain import input_rules

# Imported from here by the API and the Temporal ingest.
from work_ledger.domain.input_rules import MAX_BATCH as MAX_BATCH
from work_ledger.domain.input_rules import MAX_LEASE_SECONDS as MAX_LEASE_SECONDS
from work_ledger.domain.model import (
    Actor,
    Attempt,
    Claim,
    Disposition,
    Outcome,
    State,
    Unit,
    states_disposable_as,
)
from work_ledger.domain.shape import CostRecord, check_cost_record
from work_ledger.errors import (
    InvalidInput,
    InvariantViolation,
)
from work_ledger.service.budgets import BudgetWrites
from work_ledger.service.bulk import BulkWrites
from work_ledger.service.controls import ControlWrites
from work_ledger.service.questions import QuestionWrites
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


class Ledger(ShapeWrites, BudgetWrites, BulkWrites, ControlWrites, TelemetryWrites, QuestionWrites):
    """The ledger's use cases over a `Store`: the writes here, register, split and waive in
    `ShapeWrites`, budgets in `BudgetWrites`, bulk dispose and release in `BulkWrites`, flow
    controls in `ControlWrites`, Claude Code's telemetry in `TelemetryWrites`, block,
    unblock and cancel in `QuestionWrites`, the reads in `LedgerReads`."""

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
