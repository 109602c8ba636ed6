"""One batch, many units: different units' events are projected side by side, one unit's
in the order given, and a refused step still leaves nothing of itself behind."""

from __future__ import annotations

import asyncio

import asyncpg

from support.projection_streams import EVIDENCE, OPERATOR, event, register_workflows
from work_ledger.domain.model import State
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.ingest import EventOutcome, Projector


async def _state(ledger: Ledger, workflow_id: str) -> State:
    return (await ledger.get_unit(f"unit-{workflow_id}")).unit.state


async def test_a_locked_unit_does_not_hold_back_the_other_units_of_its_batch(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """The batch's first unit is row-locked by another transaction: the units after it are
    projected meanwhile (one after another, they would wait behind it), and once the lock
    goes, the locked unit's two events apply in their order."""
    others = ["side-a", "side-b", "side-c"]
    await register_workflows(ledger, "side-held", *others)
    events = [
        event("side-held", "started", 1),
        event("side-held", "completed", 2, evidence_url=EVIDENCE),
        *(event(w, "started", 1) for w in others),
    ]
    holding = raw.transaction()
    await holding.start()
    await raw.execute("SELECT 1 FROM work_units WHERE workflow_id = 'side-held' FOR UPDATE")
    projecting = asyncio.create_task(projector.project(events))
    try:
        async with asyncio.timeout(60):
            while True:
                if [await _state(ledger, w) for w in others] == [State.IN_PROGRESS] * 3:
                    break
                await asyncio.sleep(0.05)
        assert not projecting.done()
        assert await _state(ledger, "side-held") is State.READY
    finally:
        await holding.rollback()
    report = await projecting
    assert [r.outcome for r in report.results] == [EventOutcome.APPLIED] * len(events)
    assert [r.to_state for r in report.results[:2]] == [State.IN_PROGRESS, State.VERIFIED]
    assert await _state(ledger, "side-held") is State.VERIFIED
    assert await ledger.audit() == []


async def test_a_refused_event_beside_applied_units_is_recorded_once(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """A completion of a blocked unit is refused (its transaction, run without a savepoint,
    rolls back, and the event goes again with one): the refusal is recorded once, the
    unit and its attempts stay as they were, and the unit beside it in the batch applies."""
    await register_workflows(ledger, "side-ok", "side-refused")
    await projector.project([event("side-refused", "started", 1)])
    await ledger.block("unit-side-refused", OPERATOR, "which region?")
    before = await ledger.get_unit("unit-side-refused")
    report = await projector.project(
        [
            event("side-refused", "completed", 2, evidence_url=EVIDENCE),
            event("side-ok", "completed", 2, evidence_url=EVIDENCE),
        ]
    )
    assert [r.outcome for r in report.results] == [EventOutcome.REFUSED, EventOutcome.APPLIED]
    after = await ledger.get_unit("unit-side-refused")
    assert (after.unit.state, after.attempts) == (before.unit.state, before.attempts)
    assert await _state(ledger, "side-ok") is State.VERIFIED
    outcomes = await raw.fetch(
        "SELECT e.detail ->> 'outcome' AS outcome FROM work_unit_events AS e "
        "JOIN work_units AS u ON u.id = e.unit_id "
        "WHERE u.workflow_id = 'side-refused' AND e.event_type = 'projected' ORDER BY e.id"
    )
    assert [r["outcome"] for r in outcomes] == ["applied", "refused"]
    assert await ledger.audit() == []
