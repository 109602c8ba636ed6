"""The Temporal projection (DESIGN §9): workflow events in, guarded transitions out, once.

Temporal is the execution truth; the ledger only *receives* its events. Each event is
projected in one transaction of its own on one connection; the events of one unit in the
order given, those of different units side by side (up to `PARALLEL` connections):

1. lock the unit whose `workflow_id` the event names (every delivery for that unit queues
   behind this lock);
2. read, under the lock, whether the event was already recorded and which projected event
   of the unit is the newest so far;
3. unless the event is a duplicate or older than that newest one, drive the unit towards
   the state the event means, through the same guarded statements of `units.sql` that
   every other caller uses. A refused step rolls the whole transaction back and the event
   is projected again from step 1, this time with its steps inside a savepoint, so the
   refusal is recorded and nothing of the steps is (refusals are rare: the common event
   saves the savepoint's two round trips);
4. append the `projected` event with `ON CONFLICT (source_event_id) DO NOTHING`. Zero rows
   means another delivery recorded it first: the whole transaction rolls back, so only a
   newly inserted event ever changes its unit.

Mapping of the steps (`lifecycle`: an event's `type` is a step's own word or Temporal's
event type name; the unit's agent is `temporal:<workflow_id>`; a unit held by any other
agent is never moved):

    started      → in_progress: ready: claim + start; claimed: start; in_progress: nothing
    progressed   → in_progress, as started; in_progress or blocked: heartbeat (lease extended)
    completed    → verified with detail.evidence_url (required): ready: claim + start +
                   verify; claimed: start + verify; in_progress: verify; verified, done: nothing
    failed,      → ready, the attempt ends `failed`: claimed, in_progress: release;
    timed_out      ready: nothing
    cancelled,   → abandoned DEFERRED: ready, blocked: dispose; claimed, in_progress: release
    terminated     (the attempt ends `abandoned`) + dispose; abandoned: nothing
    noted        → (any other Temporal event type) nothing; in_progress or blocked held by
                   the workflow: heartbeat. Recorded, never refused, never stale, and not
                   counted as the newest event of its unit

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
`temporal/<namespace>/<workflow_id>/<run_id>/<event_id>`, or `…/<run_id>/close` for a
run's close (`lifecycle.step_key`: every source derives the same key for the same step).
Namespace `default` when omitted; Temporal's event ids restart at 1 in every run, so the
run id is part of the key; namespace and run id may not contain `/`, which keeps the
format unambiguous.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import Field

from work_ledger.domain.model import Attempt, State, Unit
from work_ledger.errors import InvalidInput, InvariantViolation
from work_ledger.service.ledger import MAX_BATCH, MAX_LEASE_SECONDS, Ledger
from work_ledger.temporal.lifecycle import NOTED, STEPS, step_key, step_of
from work_ledger.temporal.steps import (
    EventOutcome,
    Prepared,
    Refused,
    Steps,
    Tx,
    UnitState,
    WorkflowEvent,
)

MAX_ID = 1000
MAX_DETAIL_BYTES = 16_000
MAX_EVENT_ID = 2**63 - 1
PARALLEL = 4  # units projected side by side (half of serve's default pool)
__all__ = [
    "MAX_EVENT_ID",
    "MAX_ID",
    "EventOutcome",
    "EventResult",
    "ProjectionReport",
    "Projector",
    "WorkflowEvent",
]


@dataclass(frozen=True, slots=True)
class EventResult:
    # It is the wire's answer too (POST /projection/events' `results`), every field always
    # sent: pydantic's JSON schema, which reads this, lists the defaulted ones as required.
    __pydantic_config__: ClassVar[dict[str, bool]] = {
        "json_schema_serialization_defaults_required": True
    }

    source_event_id: str
    outcome: EventOutcome
    unit_id: uuid.UUID | None = None
    from_state: State | None = None
    to_state: State | None = None
    invariant: Annotated[str | None, Field(description="The rule that refused the event.")] = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProjectionReport:
    results: list[EventResult]

    def count(self, outcome: EventOutcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)


class _AlreadyRecorded(Exception):
    """Raised inside the transaction to roll it back: another delivery recorded the event."""


class _Refused(Exception):
    """Raised inside a transaction without a savepoint to roll it back: a step was refused,
    and the event is projected again with one."""


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
        project each event in its own transaction: a unit's events in the order given,
        different units' side by side; the results in the order given."""
        if not 1 <= len(events) <= MAX_BATCH:
            raise InvalidInput(
                f"send between 1 and {MAX_BATCH} events per batch, not {len(events)}"
            )
        prepared = [self._prepare(i, e) for i, e in enumerate(events)]
        results: list[EventResult | None] = [None] * len(prepared)
        by_unit: dict[str, list[int]] = {}  # a workflow_id names at most one unit
        for i, p in enumerate(prepared):
            by_unit.setdefault(p.event.workflow_id, []).append(i)
        gate = asyncio.Semaphore(PARALLEL)

        async def one_unit(indexes: list[int]) -> None:
            async with gate:
                for i in indexes:
                    results[i] = await self._project_one(prepared[i])

        # Every unit runs to its end even if another fails (each event is its own
        # transaction); then the first failure is raised.
        done = await asyncio.gather(*map(one_unit, by_unit.values()), return_exceptions=True)
        for failure in done:
            if isinstance(failure, BaseException):
                raise failure
        return ProjectionReport([r for r in results if r is not None])

    # -- input ----------------------------------------------------------------------------

    def _prepare(self, index: int, e: WorkflowEvent) -> Prepared:
        where = f"events[{index}]"
        step = step_of(e.type)
        if step is None:
            raise InvalidInput(
                f"{where}.type {e.type[:100]!r} is neither a lifecycle step "
                f"({', '.join(STEPS)}) nor a Temporal event type (WorkflowExecutionStarted, "
                "EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, ...); send one of those"
            )
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
            source_event_id = self._built_key(where, e, step)
        evidence = e.detail.get("evidence_url")
        if step == "completed":
            if not isinstance(evidence, str):
                raise InvalidInput(
                    f"{where} is a completed event without detail.evidence_url: a unit is "
                    "verified only with an evidence link (DESIGN §4). Send the link to the "
                    "run's evidence (CI run, pull request) as detail.evidence_url."
                )
            self.ledger.check_evidence(evidence)
        return Prepared(
            e,
            step,
            source_event_id,
            f"temporal:{e.workflow_id}",
            evidence if isinstance(evidence, str) else None,
        )

    def _built_key(self, where: str, e: WorkflowEvent, step: str) -> str:
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
        return step_key(e.namespace, e.workflow_id, e.run_id, step, e.event_id)

    # -- one event, one transaction --------------------------------------------------------

    async def _project_one(self, p: Prepared) -> EventResult:
        try:
            try:
                return await self._attempt(p, savepoint=False)
            except _Refused:
                return await self._attempt(p, savepoint=True)
        except _AlreadyRecorded:
            return EventResult(p.source_event_id, EventOutcome.DUPLICATE)

    async def _attempt(self, p: Prepared, *, savepoint: bool) -> EventResult:
        async with self.ledger.store.pool.acquire() as conn, conn.transaction():
            return await self._in_transaction(Tx(conn), conn, p, savepoint=savepoint)

    async def _in_transaction(
        self, tx: Tx, conn: Any, p: Prepared, *, savepoint: bool
    ) -> EventResult:
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
        state = UnitState(unit, None if live is None else live.id)
        newest = target["newest_occurred_at"]
        if (
            p.step != NOTED
            and newest is not None
            and p.key
            < (
                newest,
                target["newest_event_id"],
                target["newest_source_event_id"],
            )
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
            result = await self._drive(tx, conn, p, state, savepoint=savepoint)
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

    async def _drive(
        self, tx: Tx, conn: Any, p: Prepared, state: UnitState, *, savepoint: bool
    ) -> EventResult:
        before = state.unit.state
        moving = UnitState(state.unit, state.attempt_id)
        try:
            if savepoint:
                async with conn.transaction():  # a savepoint: a refused step leaves nothing
                    await Steps(self.lease_seconds, tx, p, moving).run()
            else:
                await Steps(self.lease_seconds, tx, p, moving).run()
        except (Refused, InvariantViolation) as exc:
            if not savepoint:  # an earlier step may have written: roll back, go again
                raise _Refused from exc
            reason = exc.reason if isinstance(exc, Refused) else exc.detail
            return EventResult(
                p.source_event_id,
                EventOutcome.REFUSED,
                state.unit.id,
                before,
                before,
                exc.invariant,
                reason,
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
