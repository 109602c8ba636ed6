"""The Temporal projection (DESIGN §9): workflow events in, guarded transitions out, once.

Temporal is the execution truth; the ledger only *receives* its events. Each event is
projected in one transaction of its own on one connection:

1. lock the unit whose `workflow_id` the event names (every delivery for that unit queues
   behind this lock);
2. read, under the lock, whether the event was already recorded and which projected event
   of the unit is the newest so far;
3. unless the event is a duplicate or older than that newest one, drive the unit towards
   the state the event means, through the same guarded statements of `units.sql` that
   every other caller uses (inside a savepoint: a refused step leaves nothing behind);
4. append the `projected` event with `ON CONFLICT (source_event_id) DO NOTHING`. Zero rows
   means another delivery recorded it first: the whole transaction rolls back, so only a
   newly inserted event ever changes its unit.

Mapping (the unit's agent is `temporal:<workflow_id>`; a unit held by any other agent is
never moved):

    started      → in_progress: ready: claim + start; claimed: start; in_progress: nothing
    progressed   → in_progress, as started; in_progress or blocked: heartbeat (lease extended)
    completed    → verified with detail.evidence_url (required): ready: claim + start +
                   verify; claimed: start + verify; in_progress: verify; verified, done: nothing
    failed,      → ready, the attempt ends `failed`: claimed, in_progress: release;
    timed_out      ready: nothing
    cancelled,   → abandoned DEFERRED: ready, blocked: dispose; claimed, in_progress: release
    terminated     (the attempt ends `abandoned`) + dispose; abandoned: nothing

Every other pair is refused: recorded as `projected` with the refusal (rule and reason)
in its detail, counted as `refused`, never applied. An event older than the newest event
already projected for its unit (ordered by occurred_at, then event id, then
source_event_id) is recorded and counted as `stale`, and changes nothing: a late event
never moves a unit backwards. Since the newest event drives the unit all the way to its
state, the final state does not depend on delivery order (as long as no run starts after
an earlier run completed or was cancelled: then the late close is stale, where in order it
would have refused the new start). An event whose workflow_id
matches no unit is not recorded (every event belongs to a unit) and is counted as
`unmatched`; redelivered once the unit is registered, it applies.

`source_event_id`, when the caller does not give one, is
`temporal/<namespace>/<workflow_id>/<run_id>/<event_id>` (namespace `default` when
omitted). Temporal's event ids restart at 1 in every run, so the run id is part of the
key; namespace and run id may not contain `/`, which keeps the format unambiguous.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.domain import HELD, Attempt, Disposition, Outcome, State, Unit
from work_ledger.errors import InvalidInput, InvariantViolation
from work_ledger.service import MAX_BATCH, MAX_LEASE_SECONDS, Ledger

EVENT_TYPES = (
    "started",
    "progressed",
    "completed",
    "failed",
    "cancelled",
    "terminated",
    "timed_out",
)
MAX_ID = 1000
MAX_DETAIL_BYTES = 16_000
MAX_EVENT_ID = 2**63 - 1
DEFAULT_NAMESPACE = "default"


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
class EventResult:
    source_event_id: str
    outcome: EventOutcome
    unit_id: uuid.UUID | None = None
    from_state: State | None = None
    to_state: State | None = None
    invariant: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProjectionReport:
    results: list[EventResult]

    def count(self, outcome: EventOutcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    def as_json(self) -> dict[str, Any]:
        """The wire form: one count per outcome, then each event's result in order."""
        counts: dict[str, Any] = {
            "applied": self.count(EventOutcome.APPLIED),
            "duplicates": self.count(EventOutcome.DUPLICATE),
            "refused": self.count(EventOutcome.REFUSED),
            "stale": self.count(EventOutcome.STALE),
            "unmatched": self.count(EventOutcome.UNMATCHED),
        }
        counts["results"] = [
            {
                "source_event_id": r.source_event_id,
                "outcome": str(r.outcome),
                "unit_id": None if r.unit_id is None else str(r.unit_id),
                "from_state": r.from_state,
                "to_state": r.to_state,
                "invariant": r.invariant,
                "reason": r.reason,
            }
            for r in self.results
        ]
        return counts


def build_source_event_id(
    namespace: str | None, workflow_id: str, run_id: str, event_id: int
) -> str:
    """The exactly-once key of a Temporal history event (format in the module docstring)."""
    return f"temporal/{namespace or DEFAULT_NAMESPACE}/{workflow_id}/{run_id}/{event_id}"


@dataclass(frozen=True, slots=True)
class _Prepared:
    event: WorkflowEvent
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


class _Refused(Exception):
    def __init__(self, invariant: str, reason: str) -> None:
        super().__init__(reason)
        self.invariant = invariant
        self.reason = reason


class _AlreadyRecorded(Exception):
    """Raised inside the transaction to roll it back: another delivery recorded the event."""


class _Tx:
    """Named statements on one connection, inside the caller's transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        async with translated_errors():
            row: asyncpg.Record | None = await self.conn.fetchrow(QUERIES[name], *args)
            return row


@dataclass
class _Unit:
    """The unit as the steps of one event leave it."""

    unit: Unit
    attempt_id: uuid.UUID | None


class Projector:
    """Projects batches of workflow events onto the ledger, each exactly once.

    A workflow's claim takes `lease_seconds` (default the longest lease the ledger allows):
    Temporal, not the lease, says whether a workflow is alive, and a short lease would let
    any agent's pull-next reclaim the unit of a long-running workflow between two events.
    """

    def __init__(self, ledger: Ledger, *, lease_seconds: int = MAX_LEASE_SECONDS) -> None:
        self.ledger = ledger
        self.lease_seconds = lease_seconds

    async def project(self, events: Sequence[WorkflowEvent]) -> ProjectionReport:
        """Validate the whole batch (nothing is written if any event is malformed), then
        project each event in its own transaction, in the order given."""
        if not 1 <= len(events) <= MAX_BATCH:
            raise InvalidInput(
                f"send between 1 and {MAX_BATCH} events per batch, not {len(events)}"
            )
        prepared = [self._prepare(i, e) for i, e in enumerate(events)]
        return ProjectionReport([await self._project_one(p) for p in prepared])

    # -- input ----------------------------------------------------------------------------

    def _prepare(self, index: int, e: WorkflowEvent) -> _Prepared:
        where = f"events[{index}]"
        if e.type not in EVENT_TYPES:
            raise InvalidInput(f"{where}.type {e.type!r} is not one of {', '.join(EVENT_TYPES)}")
        _bounded(f"{where}.workflow_id", e.workflow_id)
        for name, value in (("namespace", e.namespace), ("run_id", e.run_id)):
            if value is not None:
                _bounded(f"{where}.{name}", value)
        if e.occurred_at.tzinfo is None:
            raise InvalidInput(
                f"{where}.occurred_at has no time zone; send it with one, e.g. 2026-01-31T12:00:00Z"
            )
        if e.event_id is not None and not 1 <= e.event_id <= MAX_EVENT_ID:
            raise InvalidInput(f"{where}.event_id must be a positive Temporal event id (int64)")
        try:
            dumped = json.dumps(e.detail, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"{where}.detail must be plain JSON (objects, lists, text, numbers)"
            ) from None
        if _has_nul(e.detail):
            raise InvalidInput(f"{where}.detail contains a NUL character, which JSONB cannot hold")
        if len(dumped) > MAX_DETAIL_BYTES:
            raise InvalidInput(f"{where}.detail is over {MAX_DETAIL_BYTES} bytes of JSON")
        if e.source_event_id is not None:
            _bounded(f"{where}.source_event_id", e.source_event_id)
            source_event_id = e.source_event_id
        else:
            source_event_id = self._built_key(where, e)
        evidence = e.detail.get("evidence_url")
        if e.type == "completed":
            if not isinstance(evidence, str):
                raise InvalidInput(
                    f"{where} is a completed event without detail.evidence_url: a unit is "
                    "verified only with an evidence link (DESIGN §4). Send the link to the "
                    "run's evidence (CI run, pull request) as detail.evidence_url."
                )
            self.ledger.check_evidence(evidence)
        return _Prepared(
            e,
            source_event_id,
            f"temporal:{e.workflow_id}",
            evidence if isinstance(evidence, str) else None,
        )

    def _built_key(self, where: str, e: WorkflowEvent) -> str:
        if e.run_id is None or e.event_id is None:
            raise InvalidInput(
                f"{where} has no source_event_id; send one, or send run_id and event_id "
                "(with namespace) so the ledger builds it"
            )
        for name, value in (("namespace", e.namespace), ("run_id", e.run_id)):
            if value is not None and "/" in value:
                raise InvalidInput(
                    f"{where}.{name} {value[:200]!r} may not contain '/' (it separates the "
                    "parts of the source_event_id); send source_event_id yourself instead"
                )
        return build_source_event_id(e.namespace, e.workflow_id, e.run_id, e.event_id)

    # -- one event, one transaction --------------------------------------------------------

    async def _project_one(self, p: _Prepared) -> EventResult:
        try:
            async with self.ledger.store.pool.acquire() as conn, conn.transaction():
                return await self._in_transaction(_Tx(conn), conn, p)
        except _AlreadyRecorded:
            return EventResult(p.source_event_id, EventOutcome.DUPLICATE)

    async def _in_transaction(self, tx: _Tx, conn: Any, p: _Prepared) -> EventResult:
        locked = await tx.fetchrow("projection_lock_unit", p.event.workflow_id)
        if locked is None:
            return EventResult(
                p.source_event_id,
                EventOutcome.UNMATCHED,
                reason=f"no unit has workflow_id {p.event.workflow_id!r}; register the unit "
                "with that workflow_id, then deliver the event again (it was not recorded)",
            )
        target = await tx.fetchrow("projection_target", locked["id"], p.source_event_id)
        assert target is not None  # the row is locked by this transaction
        if target["seen"]:
            raise _AlreadyRecorded
        unit = Unit.from_record(target["unit"])
        live = None if target["attempt"] is None else Attempt.from_record(target["attempt"])
        state = _Unit(unit, None if live is None else live.id)
        newest = target["newest_occurred_at"]
        if newest is not None and p.key < (
            newest,
            target["newest_event_id"],
            target["newest_source_event_id"],
        ):
            result = EventResult(
                p.source_event_id,
                EventOutcome.STALE,
                unit.id,
                unit.state,
                unit.state,
                reason=f"older than {target['newest_source_event_id']}, already projected; "
                "a late event never moves a unit",
            )
        else:
            result = await self._drive(tx, conn, p, state)
        detail = p.record(
            result.outcome,
            from_state=result.from_state,
            to_state=result.to_state,
            invariant=result.invariant,
            reason=result.reason,
        )
        args = (unit.id, p.source_event_id, p.agent, detail, state.attempt_id)
        if await tx.fetchrow("record_projected_event", *args) is None:
            raise _AlreadyRecorded
        return result

    async def _drive(self, tx: _Tx, conn: Any, p: _Prepared, state: _Unit) -> EventResult:
        before = state.unit.state
        moving = _Unit(state.unit, state.attempt_id)
        try:
            async with conn.transaction():  # a savepoint: a refused step leaves nothing
                await _Steps(self.lease_seconds, tx, p, moving).run()
        except _Refused as refusal:
            return EventResult(
                p.source_event_id,
                EventOutcome.REFUSED,
                state.unit.id,
                before,
                before,
                refusal.invariant,
                refusal.reason,
            )
        except InvariantViolation as exc:
            return EventResult(
                p.source_event_id,
                EventOutcome.REFUSED,
                state.unit.id,
                before,
                before,
                exc.invariant,
                exc.detail,
            )
        state.unit, state.attempt_id = moving.unit, moving.attempt_id
        return EventResult(
            p.source_event_id, EventOutcome.APPLIED, state.unit.id, before, state.unit.state
        )


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _bounded(name: str, value: str) -> None:
    if not 1 <= len(value) <= MAX_ID:
        raise InvalidInput(f"{name} must be 1..{MAX_ID} characters, not {len(value)}")
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL character, which the ledger cannot store")


class _Steps:
    """Drives one unit towards the state one event means, step by guarded step."""

    def __init__(self, lease_seconds: int, tx: _Tx, p: _Prepared, state: _Unit) -> None:
        self.lease, self.tx, self.p, self.state = lease_seconds, tx, p, state
        self.link = {"source_event_id": p.source_event_id, "workflow_event": p.event.type}

    @property
    def unit(self) -> Unit:
        return self.state.unit

    async def run(self) -> None:
        kind = self.p.event.type
        current = self.unit.state
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
            await self._transition(State.IN_PROGRESS, [State.CLAIMED])
        elif self.unit.state is State.IN_PROGRESS or (
            self.unit.state is State.BLOCKED and heartbeat
        ):
            if heartbeat:
                await self._heartbeat()
        else:
            raise self._wrong_state(target)

    async def _to_verified(self) -> None:
        if self.unit.state in (State.VERIFIED, State.DONE):
            return
        await self._to_in_progress(heartbeat=False, target=State.VERIFIED)
        await self._transition(
            State.VERIFIED,
            [State.IN_PROGRESS],
            evidence_url=self.p.evidence_url,
            outcome=Outcome.VERIFIED,
        )

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
        self._after(row, "claim")

    async def _transition(
        self,
        to: State,
        leaving: list[State],
        *,
        evidence_url: str | None = None,
        outcome: Outcome | None = None,
    ) -> None:
        event = "released" if to is State.READY else "transitioned"
        row = await self.tx.fetchrow(
            "transition_unit",
            self.unit.id,
            to,
            leaving,
            self.p.agent,
            None,
            evidence_url,
            outcome,
            event,
            self.link,
            self.p.agent,
        )
        self._after(row, f"move to {to}")

    async def _release(self, outcome: Outcome) -> None:
        await self._transition(State.READY, [State.CLAIMED, State.IN_PROGRESS], outcome=outcome)

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

    def _wrong_state(self, target: State) -> _Refused:
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

    def _refuse(self, invariant: str, why: str) -> _Refused:
        return _Refused(
            invariant,
            f"workflow {self.p.event.workflow_id} {self.p.event.type}, but unit "
            f"{self.unit.external_ref} cannot follow: {why}. The event is recorded with this "
            "refusal and will not be applied again; `work-ledger reconcile` lists the mismatch.",
        )
