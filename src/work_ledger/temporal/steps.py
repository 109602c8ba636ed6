"""The steps that drive one unit towards the state one workflow event means.

Each step is one guarded statement of `units.sql` (claim_unit, start_unit, verify_unit,
transition_unit for a release, heartbeat_attempt, dispose_unit), the very statement the
API runs for the same step; a refused step raises `Refused`, and the caller's
savepoint leaves nothing behind. The mapping is the one in `ingest`'s docstring.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.domain import flow, shape
from work_ledger.domain.model import HELD, Attempt, Disposition, Outcome, State, Unit
from work_ledger.errors import InvariantViolation
from work_ledger.temporal.lifecycle import NOTED


class EventOutcome(StrEnum):
    """What the projection did with one event."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    REFUSED = "refused"
    STALE = "stale"
    UNMATCHED = "unmatched"


@dataclass(frozen=True, slots=True)
class WorkflowEvent:
    """One workflow lifecycle event, as a projector delivers it."""

    workflow_id: str
    type: str
    occurred_at: dt.datetime
    source_event_id: str | None = None
    namespace: str | None = None
    run_id: str | None = None
    event_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated event: its key, its step (lifecycle.STEPS or NOTED) and its agent."""

    event: WorkflowEvent
    step: str
    source_event_id: str
    agent: str
    evidence_url: str | None

    @property
    def key(self) -> tuple[dt.datetime, int, str]:
        return (self.event.occurred_at, self.event.event_id or 0, self.source_event_id)

    def record(self, outcome: EventOutcome, **extra: Any) -> dict[str, Any]:
        """The detail of the `projected` event: the event itself and what became of it."""
        e = self.event
        detail: dict[str, Any] = {
            "type": e.type,
            "step": self.step,
            "workflow_id": e.workflow_id,
            "namespace": e.namespace,
            "run_id": e.run_id,
            "event_id": e.event_id,
            "occurred_at": e.occurred_at.isoformat(),
            "outcome": str(outcome),
        }
        detail.update({k: v for k, v in extra.items() if v is not None})
        if e.detail:
            detail["detail"] = e.detail
        return {k: v for k, v in detail.items() if v is not None}


class Refused(Exception):
    """The state machine does not allow the step: recorded with the rule, never applied."""

    def __init__(self, invariant: str, reason: str) -> None:
        super().__init__(reason)
        self.invariant = invariant
        self.reason = reason


class Tx:
    """Named statements on one connection, inside the caller's transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        async with translated_errors():
            row: asyncpg.Record | None = await self.conn.fetchrow(QUERIES[name], *args)
            return row


@dataclass
class UnitState:
    """The unit as the steps of one event leave it."""

    unit: Unit
    attempt_id: uuid.UUID | None


class Steps:
    """Drives one unit towards the state one event means, step by guarded step."""

    def __init__(self, lease_seconds: int, tx: Tx, p: Prepared, state: UnitState) -> None:
        self.lease, self.tx, self.p, self.state = lease_seconds, tx, p, state
        self.link = {"source_event_id": p.source_event_id, "workflow_event": p.event.type}

    @property
    def unit(self) -> Unit:
        return self.state.unit

    async def run(self) -> None:
        kind = self.p.step
        current = self.unit.state
        if kind == NOTED:
            await self._sign_of_life()
            return
        if current in HELD and self.unit.claimed_by != self.p.agent:
            raise self._refuse(
                "unit_claimed_only_when_claimable",
                f"it is held by {self.unit.claimed_by} ({current}), not by the workflow "
                f"({self.p.agent}); the projection moves only a unit that is ready or held by "
                "its own workflow. The holder must release it first.",
            )
        if kind in ("started", "progressed"):
            await self._to_in_progress(heartbeat=kind == "progressed", target=State.IN_PROGRESS)
        elif kind == "completed":
            await self._to_verified()
        elif kind in ("failed", "timed_out"):
            await self._to_ready()
        else:
            await self._to_deferred()

    async def _to_in_progress(self, *, heartbeat: bool, target: State) -> None:
        if self.unit.state is State.READY:
            await self._claim()
        if self.unit.state is State.CLAIMED:
            await self._start()
        elif self.unit.state is State.IN_PROGRESS or (
            self.unit.state is State.BLOCKED and heartbeat
        ):
            if heartbeat:
                await self._heartbeat()
        else:
            raise self._wrong_state(target)

    async def _sign_of_life(self) -> None:
        """A Temporal event that is no step: the workflow lives, so a lease it holds on a
        running unit is extended; anything else stays as it is."""
        held = self.unit.claimed_by == self.p.agent and self.state.attempt_id is not None
        if held and self.unit.state in (State.IN_PROGRESS, State.BLOCKED):
            await self._heartbeat()

    async def _to_verified(self) -> None:
        if self.unit.state in (State.VERIFIED, State.DONE):
            return
        await self._to_in_progress(heartbeat=False, target=State.VERIFIED)
        await self._verify()

    async def _to_ready(self) -> None:
        current = self.unit.state
        if current in (State.CLAIMED, State.IN_PROGRESS):
            await self._release(Outcome.FAILED)
        elif current is not State.READY:
            raise self._wrong_state(State.READY)

    async def _to_deferred(self) -> None:
        current = self.unit.state
        if current is State.ABANDONED:
            return
        if current in (State.CLAIMED, State.IN_PROGRESS):
            await self._release(Outcome.ABANDONED)
        if self.unit.state not in (State.READY, State.BLOCKED):
            raise self._refuse(
                "unit_disposition_allowed_from_state",
                f"it is {current}; DEFERRED can close a ready, claimed, in_progress or blocked "
                "unit only. An operator decides what happens to it next.",
            )
        holder = self.p.agent if self.unit.state is State.BLOCKED else None
        row = await self.tx.fetchrow(
            "dispose_unit",
            self.unit.id,
            Disposition.DEFERRED,
            [State.READY, State.BLOCKED],
            holder,
            None,
            None,
            f"workflow {self.p.event.type} ({self.p.source_event_id})",
            self.p.agent,
        )
        self._after(row, "dispose DEFERRED")

    # -- the guarded statements of units.sql ----------------------------------------------

    async def _claim(self) -> None:
        row = await self.tx.fetchrow("claim_unit", self.p.agent, None, self.lease, self.unit.id)
        if row is None and self.unit.state is State.READY:
            # A workflow's claim is a claim (DESIGN §13): recorded with the rule that
            # refused it, as the API words a named claim's refusal, not as a bad transition.
            held_back = await self._held_back()
            if held_back is not None:
                raise held_back
        self._after(row, "claim")

    async def _held_back(self) -> InvariantViolation | None:
        """Why a claim of this ready unit found nothing: its budget is spent, its scope is
        paused or at its cap, or another unit holds one of its exclusion keys."""
        u = self.unit
        budget = await self.tx.fetchrow("exhausted_budget_of", u.fleet, u.domain)
        if budget is not None:
            return shape.budget_exhausted(u, dict(budget))
        control = await self.tx.fetchrow("closed_control_of", u.fleet, u.domain, True)
        if control is not None:
            return flow.claim_held_back(u, dict(control))
        holder = await self.tx.fetchrow("key_holders_of", u.id)
        return None if holder is None else flow.key_held(u, dict(holder))

    async def _start(self) -> None:
        """The API's own start (its `transitioned` event carries no detail: the delivery's
        `projected` event, in the same transaction, names the workflow event)."""
        row = await self.tx.fetchrow(
            "start_unit", self.unit.id, [State.CLAIMED], self.p.agent, None, self.p.agent
        )
        self._after(row, "start")

    async def _verify(self) -> None:
        row = await self.tx.fetchrow(
            "verify_unit",
            self.unit.id,
            [State.IN_PROGRESS],
            self.p.agent,
            None,
            self.p.evidence_url,
            self.link,
            self.p.agent,
        )
        self._after(row, "verify")

    async def _release(self, outcome: Outcome) -> None:
        row = await self.tx.fetchrow(
            "transition_unit",
            self.unit.id,
            State.READY,
            [State.CLAIMED, State.IN_PROGRESS],
            self.p.agent,
            None,
            None,
            outcome,
            "released",
            self.link,
            self.p.agent,
        )
        self._after(row, "release")

    async def _heartbeat(self) -> None:
        row = await self.tx.fetchrow(
            "heartbeat_attempt", self.state.attempt_id, self.p.agent, self.lease
        )
        self._after(row, "heartbeat")

    def _after(self, row: asyncpg.Record | None, action: str) -> None:
        if row is None:
            raise self._refuse(
                "unit_state_transition_allowed",
                f"the ledger refused to {action} it from {self.unit.state}",
            )
        self.state.unit = Unit.from_record(row["unit"])
        keys = set(row.keys())  # an asyncpg Record: `in` looks at values, not keys
        if "attempt" in keys and row["attempt"] is not None:
            self.state.attempt_id = Attempt.from_record(row["attempt"]).id

    # -- refusals -------------------------------------------------------------------------

    def _wrong_state(self, target: State) -> Refused:
        current = self.unit.state
        why = {
            State.BLOCKED: "it is blocked until its open question is answered (unblock), or an "
            "operator disposes it",
            State.VERIFIED: "it is verified; only dispose MIGRATED follows",
            State.DONE: "it is done for good",
            State.ABANDONED: f"it was abandoned {self.unit.disposition} for good",
        }.get(current, f"it is {current}")
        return self._refuse(
            "unit_state_transition_allowed",
            f"{why}; {current} → {target} is not a transition of DESIGN §4",
        )

    def _refuse(self, invariant: str, why: str) -> Refused:
        return Refused(
            invariant,
            f"workflow {self.p.event.workflow_id} {self.p.event.type}, but unit "
            f"{self.unit.external_ref} cannot follow: {why}. The event is recorded with this "
            "refusal and will not be applied again; `work-ledger reconcile` lists the mismatch.",
        )
