"""The projection meets the fleet's flow controls (DESIGN §13): a workflow's claim is a claim.

A workflow's `started` (or `completed` on a ready unit) claims as the workflow's agent, so
a pause, a cap or a held exclusion key refuses it like any claim: recorded as `refused`
with the control's rule, the unit untouched, nothing retried. A workflow already holding
its unit is held work, which no control stops: its progress and completion apply.
"""

from __future__ import annotations

import asyncpg

from support.projection_streams import EVIDENCE, OPERATOR, event, register_workflows
from work_ledger.domain.flow import ControlChange
from work_ledger.domain.model import NewUnit, State
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.ingest import EventOutcome, Projector


async def _projected(raw: asyncpg.Connection) -> dict[str, object]:
    detail: dict[str, object] = await raw.fetchval(
        "SELECT detail FROM work_unit_events WHERE event_type = 'projected' ORDER BY id DESC"
    )
    return detail


async def test_started_in_a_paused_scope_is_refused_and_recorded(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """A paused fleet refuses the workflow's claim: recorded with the rule and the pause's
    reason, the unit still ready; after the resume, the workflow's next event applies."""
    await register_workflows(ledger, "wf-1")
    await ledger.set_controls(ControlChange("fleet-a", "legacy down", paused=True), OPERATOR)
    report = await projector.project([event("wf-1", "started", 1)])
    detail = await _projected(raw)
    unit = (await ledger.get_unit("unit-wf-1")).unit
    assert (report.count(EventOutcome.REFUSED), unit.state, unit.attempt_count) == (
        1,
        State.READY,
        0,
    )
    assert (detail["outcome"], detail["invariant"]) == ("refused", "paused")
    assert "legacy down" in str(detail["reason"])
    await ledger.set_controls(ControlChange("fleet-a", "back", paused=False), OPERATOR)
    report = await projector.project([event("wf-1", "completed", 2, evidence_url=EVIDENCE)])
    assert report.count(EventOutcome.APPLIED) == 1
    assert (await ledger.get_unit("unit-wf-1")).unit.state is State.VERIFIED


async def test_a_running_workflow_goes_on_through_a_pause(
    ledger: Ledger, projector: Projector
) -> None:
    """Held work is not stopped: a workflow that holds its unit progresses and completes
    while its scope is paused."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    await ledger.set_controls(
        ControlChange("fleet-a", "weekend", domain="orders", paused=True), OPERATOR
    )
    report = await projector.project(
        [event("wf-1", "progressed", 2), event("wf-1", "completed", 3, evidence_url=EVIDENCE)]
    )
    assert report.count(EventOutcome.APPLIED) == 2
    assert (await ledger.get_unit("unit-wf-1")).unit.state is State.VERIFIED


async def test_started_at_the_cap_is_refused_with_the_scope(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """A domain at its cap refuses the workflow's claim (cap_reached), unit untouched."""
    await register_workflows(ledger, "wf-1", "wf-2")
    await ledger.set_controls(
        ControlChange("fleet-a", "ramp", domain="orders", max_live=1), OPERATOR
    )
    await projector.project([event("wf-1", "started", 1)])
    report = await projector.project([event("wf-2", "started", 1)])
    detail = await _projected(raw)
    assert report.count(EventOutcome.REFUSED) == 1
    assert detail["invariant"] == "cap_reached"
    assert (await ledger.get_unit("unit-wf-2")).unit.state is State.READY


async def test_started_on_a_unit_whose_key_is_held_is_refused(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """Another unit holding its exclusion key refuses the workflow's claim."""
    await ledger.register(
        [
            NewUnit("holder", "fleet-a", "orders", exclusive=["billing/schema"]),
            NewUnit("unit-wf-1", "fleet-a", "orders", workflow_id="wf-1",
                    exclusive=["billing/schema"]),
        ],
        OPERATOR,
    )  # fmt: skip
    await ledger.claim_named("holder", "agent-7")
    report = await projector.project([event("wf-1", "started", 1)])
    detail = await _projected(raw)
    assert report.count(EventOutcome.REFUSED) == 1
    assert detail["invariant"] == "exclusive_key_held"
    assert (await ledger.get_unit("unit-wf-1")).unit.state is State.READY
