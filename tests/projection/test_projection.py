"""The projection service: the mapping, refusals, order, and exactly-once delivery."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import AsyncIterator

import asyncpg
import pytest

from support.projection_streams import EPOCH, EVIDENCE, OPERATOR, Stream, event, register_workflows
from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, Outcome, State
from work_ledger.errors import InvalidInput
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.ingest import (
    EventOutcome,
    Projector,
    WorkflowEvent,
)
from work_ledger.temporal.lifecycle import source_event_id
from work_ledger.temporal.steps import Tx


async def _state(ledger: Ledger, workflow_id: str) -> tuple[State, Disposition | None, int]:
    unit = (await ledger.get_unit(f"unit-{workflow_id}")).unit
    return unit.state, unit.disposition, unit.attempt_count


# -- the mapping -------------------------------------------------------------------------


async def test_started_claims_and_starts_as_the_workflow(
    ledger: Ledger, projector: Projector
) -> None:
    """started on a ready unit: claimed by temporal:<workflow_id>, then in_progress."""
    await register_workflows(ledger, "wf-1")
    report = await projector.project([event("wf-1", "started", 1)])
    unit = (await ledger.get_unit("unit-wf-1")).unit
    assert (report.count(EventOutcome.APPLIED), unit.state, unit.claimed_by) == (
        1,
        State.IN_PROGRESS,
        "temporal:wf-1",
    )


async def test_workflow_claim_outlasts_pull_next_of_other_agents(
    ledger: Ledger, projector: Projector
) -> None:
    """The workflow's lease is the ledger's longest: a day, not the agents' default."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    unit = (await ledger.get_unit("unit-wf-1")).unit
    assert unit.lease_expires_at is not None
    assert unit.lease_expires_at - unit.updated_at >= dt.timedelta(hours=23)
    assert (await ledger.claim("agent-9")).unit is None


async def test_completed_verifies_with_the_evidence_link(
    ledger: Ledger, projector: Projector
) -> None:
    """completed: in_progress → verified, the link recorded on the unit and its attempt."""
    await register_workflows(ledger, "wf-1")
    await projector.project(
        [event("wf-1", "started", 1), event("wf-1", "completed", 9, evidence_url=EVIDENCE)]
    )
    detail = await ledger.get_unit("unit-wf-1")
    assert (detail.unit.state, detail.unit.evidence_urls, detail.attempts[0].outcome) == (
        State.VERIFIED,
        [EVIDENCE],
        Outcome.VERIFIED,
    )


@pytest.mark.parametrize("kind", ["failed", "timed_out"])
async def test_failure_releases_the_unit_for_another_attempt(
    ledger: Ledger, projector: Projector, kind: str
) -> None:
    """failed / timed_out: back to ready, the attempt ends failed."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1), event("wf-1", kind, 9)])
    detail = await ledger.get_unit("unit-wf-1")
    assert (detail.unit.state, detail.attempts[0].outcome) == (State.READY, Outcome.FAILED)


@pytest.mark.parametrize("kind", ["cancelled", "terminated"])
async def test_cancellation_defers_a_running_unit(
    ledger: Ledger, projector: Projector, kind: str
) -> None:
    """cancelled / terminated of a running unit: released (abandoned), then DEFERRED."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1), event("wf-1", kind, 9)])
    detail = await ledger.get_unit("unit-wf-1")
    assert (detail.unit.state, detail.unit.disposition, detail.attempts[0].outcome) == (
        State.ABANDONED,
        Disposition.DEFERRED,
        Outcome.ABANDONED,
    )


async def test_cancellation_defers_a_blocked_unit(ledger: Ledger, projector: Projector) -> None:
    """cancelled of a unit blocked on a question: DEFERRED, the question cancelled."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    await ledger.block("unit-wf-1", OPERATOR, "which currency?")
    await projector.project([event("wf-1", "cancelled", 9)])
    detail = await ledger.get_unit("unit-wf-1")
    assert (detail.unit.disposition, str(detail.questions[0].status)) == (
        Disposition.DEFERRED,
        "cancelled",
    )


async def test_progressed_extends_the_lease(ledger: Ledger, projector: Projector) -> None:
    """progressed on an in_progress unit is a heartbeat: the lease moves forward."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    before = (await ledger.get_unit("unit-wf-1")).unit.lease_expires_at
    await asyncio.sleep(0.01)
    await projector.project([event("wf-1", "progressed", 5)])
    after = (await ledger.get_unit("unit-wf-1")).unit.lease_expires_at
    assert before is not None
    assert after is not None
    assert after > before


async def test_completed_on_a_ready_unit_drives_it_through_every_step(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """A completed event arriving first still walks claim → start → verify, one event each."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "completed", 9, evidence_url=EVIDENCE)])
    rows = await raw.fetch(
        "SELECT event_type::text, to_state::text FROM work_unit_events ORDER BY id"
    )
    assert [tuple(r) for r in rows] == [
        ("registered", "ready"),
        ("claimed", "claimed"),
        ("transitioned", "in_progress"),
        ("transitioned", "verified"),
        ("projected", None),
    ]


async def test_steps_run_the_apis_own_statements(
    ledger: Ledger, projector: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claim, start, verify and release are the statements the API runs for them, not
    copies: a change to the API's start is the projection's too."""
    ran: list[str] = []
    statement = Tx.fetchrow

    async def noted(tx: Tx, name: str, *args: object) -> asyncpg.Record | None:
        ran.append(name)
        return await statement(tx, name, *args)

    monkeypatch.setattr(Tx, "fetchrow", noted)
    await register_workflows(ledger, "wf-1", "wf-2")
    await projector.project([event("wf-1", "completed", 9, evidence_url=EVIDENCE)])
    await projector.project([event("wf-2", "started", 1), event("wf-2", "failed", 2)])
    life = ["claim_unit", "start_unit", "verify_unit"]  # wf-1: completed on a ready unit
    failed = ["claim_unit", "start_unit", "transition_unit"]  # wf-2: started, failed
    own = ("projection_lock_unit", "projection_target", "record_projected_event")
    assert [name for name in ran if name not in own] == life + failed


# -- refusals, late and unknown events ---------------------------------------------------


async def test_refused_event_is_recorded_and_counted(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """started on a unit held by a human agent: refused, recorded with the rule, unit untouched."""
    await register_workflows(ledger, "wf-1")
    await ledger.claim_named("unit-wf-1", "agent-7")
    report = await projector.project([event("wf-1", "started", 1)])
    detail = await raw.fetchval(
        "SELECT detail FROM work_unit_events WHERE event_type = 'projected'"
    )
    unit = (await ledger.get_unit("unit-wf-1")).unit
    assert (report.count(EventOutcome.REFUSED), unit.claimed_by, unit.state) == (
        1,
        "agent-7",
        State.CLAIMED,
    )
    assert (detail["outcome"], detail["invariant"]) == (
        "refused",
        "unit_claimed_only_when_claimable",
    )
    assert "held by agent-7" in detail["reason"]


async def test_refused_multi_step_event_leaves_no_partial_step(
    ledger: Ledger, projector: Projector
) -> None:
    """completed on a blocked unit is refused as a whole: nothing of it remains."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    await ledger.block("unit-wf-1", OPERATOR, "which currency?")
    before = await ledger.get_unit("unit-wf-1")
    report = await projector.project([event("wf-1", "completed", 9, evidence_url=EVIDENCE)])
    after = await ledger.get_unit("unit-wf-1")
    assert report.results[0].outcome is EventOutcome.REFUSED
    assert (after.unit.state, after.attempts) == (before.unit.state, before.attempts)
    assert await ledger.audit() == []


async def test_older_event_never_moves_the_unit_back(ledger: Ledger, projector: Projector) -> None:
    """started delivered after completed is recorded as stale; the unit stays verified."""
    await register_workflows(ledger, "wf-1")
    late = await projector.project(
        [event("wf-1", "completed", 9, evidence_url=EVIDENCE), event("wf-1", "started", 1)]
    )
    assert [r.outcome for r in late.results] == [EventOutcome.APPLIED, EventOutcome.STALE]
    assert await _state(ledger, "wf-1") == (State.VERIFIED, None, 1)


async def test_event_id_orders_events_of_the_same_instant(
    ledger: Ledger, projector: Projector
) -> None:
    """Same occurred_at: the lower event id of the run is the older one, hence stale."""
    await register_workflows(ledger, "wf-1")
    done = event("wf-1", "completed", 9, evidence_url=EVIDENCE)
    start = WorkflowEvent("wf-1", "started", done.occurred_at, run_id="run-1", event_id=1)
    report = await projector.project([done, start])
    assert [r.outcome for r in report.results] == [EventOutcome.APPLIED, EventOutcome.STALE]


async def test_unknown_workflow_is_reported_not_recorded(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """An event of a workflow no unit carries is counted unmatched and applies once registered."""
    first = await projector.project([event("wf-9", "started", 1)])
    await register_workflows(ledger, "wf-9")
    second = await projector.project([event("wf-9", "started", 1)])
    assert (first.count(EventOutcome.UNMATCHED), second.count(EventOutcome.APPLIED)) == (1, 1)
    assert (
        await raw.fetchval(
            "SELECT count(*) FROM work_unit_events WHERE source_event_id IS NOT NULL"
        )
        == 1
    )


async def test_malformed_batch_writes_nothing(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """One completed event without evidence refuses the whole batch with a 422, nothing written."""
    await register_workflows(ledger, "wf-1")
    with pytest.raises(InvalidInput, match="evidence_url"):
        await projector.project([event("wf-1", "started", 1), event("wf-1", "completed", 9)])
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"type": "paused"}, "is neither a lifecycle step"),
        ({"occurred_at": dt.datetime(2026, 1, 1)}, "no time zone"),
        ({"run_id": None}, "no source_event_id"),
        ({"run_id": "a/b"}, "may not contain '/'"),
        ({"namespace": ""}, "1..1000 characters"),
        ({"event_id": 0}, "positive"),
        ({"workflow_id": ""}, "1..1000 characters"),
        ({"detail": {"at": EPOCH}}, "plain JSON"),
        ({"detail": {"log": "a\x00b"}}, "NUL"),
        ({"detail": {"ratio": float("nan")}}, "plain JSON"),
        ({"workflow_id": "wf\x001"}, "NUL"),
        ({"event_id": 2**63}, "int64"),
    ],
)
async def test_invalid_event_is_refused_with_its_rule(
    projector: Projector, change: dict[str, object], message: str
) -> None:
    """Each malformed field is named in the error, with what to send instead."""
    fields: dict[str, object] = {
        "workflow_id": "wf-1",
        "type": "started",
        "occurred_at": EPOCH,
        "run_id": "run-1",
        "event_id": 1,
    } | change
    with pytest.raises(InvalidInput, match=message):
        await projector.project([WorkflowEvent(**fields)])  # type: ignore[arg-type]


def test_source_event_id_is_namespace_workflow_run_event() -> None:
    """The built key names the namespace, workflow, run and event (default namespace)."""
    assert source_event_id(None, "wf/a", "r-1", 7) == "temporal/default/wf/a/r-1/7"


# -- exactly once ------------------------------------------------------------------------


def _streams(prefix: str) -> list[Stream]:
    return [
        Stream(f"{prefix}-a").run("progressed", "progressed", "completed"),
        Stream(f"{prefix}-b").run("progressed", "failed").run("progressed", "completed"),
        Stream(f"{prefix}-c").run("timed_out").run("progressed", "timed_out"),
        Stream(f"{prefix}-d").run("progressed", "cancelled"),
        Stream(f"{prefix}-e").run("terminated"),
        Stream(f"{prefix}-f").run("progressed"),
    ]


async def _transitions(raw: asyncpg.Connection) -> list[tuple[str, str, str | None]]:
    rows = await raw.fetch(
        "SELECT u.external_ref, e.event_type::text, e.to_state::text "
        "FROM work_unit_events AS e JOIN work_units AS u ON u.id = e.unit_id "
        "WHERE e.event_type <> 'projected' ORDER BY e.id"
    )
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_replayed_stream_changes_nothing_the_second_time(
    ledger: Ledger, projector: Projector, raw: asyncpg.Connection
) -> None:
    """T2: replay → 0 applied, N duplicates, each transition once, each source id once."""
    streams = _streams("wf")
    await register_workflows(ledger, *(s.workflow_id for s in streams))
    events = [e for s in streams for e in s.events]
    first = await projector.project(events)
    transitions = await _transitions(raw)
    second = await projector.project(events)
    assert first.count(EventOutcome.APPLIED) == len(events)
    assert (second.count(EventOutcome.APPLIED), second.count(EventOutcome.DUPLICATE)) == (
        0,
        len(events),
    )
    assert await _transitions(raw) == transitions
    once = await raw.fetchval(
        "SELECT count(DISTINCT source_event_id) = count(*) AND count(*) = $1 "
        "FROM work_unit_events WHERE event_type = 'projected'",
        len(events),
    )
    assert once is True
    assert await ledger.audit() == []


@pytest.fixture
async def projectors(database_url: str) -> AsyncIterator[list[Projector]]:
    """Four projectors, each over a pool of one connection of its own, so deliveries race."""
    pools = await asyncio.gather(
        *(create_pool(database_url, min_size=1, max_size=1) for _ in range(4))
    )
    yield [Projector(Ledger(Store(p), lease_seconds=60)) for p in pools]
    await asyncio.gather(*(p.close() for p in pools))


async def test_concurrent_delivery_applies_each_event_once(
    ledger: Ledger, projectors: list[Projector], raw: asyncpg.Connection
) -> None:
    """The same batch from four connections at once: each event applied by exactly one."""
    streams = _streams("wf")
    await register_workflows(ledger, *(s.workflow_id for s in streams))
    events = [e for s in streams for e in s.events]
    reports = await asyncio.gather(*(p.project(events) for p in projectors))
    applied = sum(r.count(EventOutcome.APPLIED) for r in reports)
    duplicates = sum(r.count(EventOutcome.DUPLICATE) for r in reports)
    assert (applied, duplicates) == (len(events), 3 * len(events))
    per_source = await raw.fetchval(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM work_unit_events "
        "WHERE source_event_id IS NOT NULL GROUP BY source_event_id) AS s"
    )
    assert per_source == 1
    assert await ledger.audit() == []


async def test_shuffled_delivery_ends_in_the_in_order_state(
    ledger: Ledger, projector: Projector
) -> None:
    """Five shuffles of the streams end every unit where in-order delivery ends it."""
    rounds = ["in-order", *(f"shuffle{i}" for i in range(5))]
    streams = {name: _streams(name) for name in rounds}
    await register_workflows(ledger, *(s.workflow_id for ss in streams.values() for s in ss))
    finals: dict[str, list[tuple[State, Disposition | None]]] = {}
    for seed, name in enumerate(rounds):
        events = [e for s in streams[name] for e in s.events]
        if name != "in-order":
            random.Random(seed).shuffle(events)
        await projector.project(events)
        finals[name] = [(await _state(ledger, s.workflow_id))[:2] for s in streams[name]]
    assert all(final == finals["in-order"] for final in finals.values())
    assert finals["in-order"] == [
        (State.VERIFIED, None),
        (State.VERIFIED, None),
        (State.READY, None),
        (State.ABANDONED, Disposition.DEFERRED),
        (State.ABANDONED, Disposition.DEFERRED),
        (State.IN_PROGRESS, None),
    ]
    assert await ledger.audit() == []


async def test_concurrent_shuffled_deliveries_end_in_the_in_order_state(
    ledger: Ledger, projectors: list[Projector]
) -> None:
    """Four connections each deliver their own shuffle at once: once each, in-order result."""
    streams = _streams("wf")
    await register_workflows(ledger, *(s.workflow_id for s in streams))
    events = [e for s in streams for e in s.events]
    orders = [random.Random(seed).sample(events, len(events)) for seed in range(4)]
    reports = await asyncio.gather(*(p.project(o) for p, o in zip(projectors, orders, strict=True)))
    recorded = sum(len(r.results) - r.count(EventOutcome.DUPLICATE) for r in reports)
    finals = [(await _state(ledger, s.workflow_id))[:2] for s in streams]
    assert recorded == len(events)
    assert finals == [
        (State.VERIFIED, None),
        (State.VERIFIED, None),
        (State.READY, None),
        (State.ABANDONED, Disposition.DEFERRED),
        (State.ABANDONED, Disposition.DEFERRED),
        (State.IN_PROGRESS, None),
    ]
    assert await ledger.audit() == []


async def test_operator_release_is_followed_by_the_workflow_claiming_again(
    ledger: Ledger, projector: Projector
) -> None:
    """A unit released by hand while its workflow runs is claimed again on its next progress."""
    await register_workflows(ledger, "wf-1")
    await projector.project([event("wf-1", "started", 1)])
    await ledger.release("unit-wf-1", Actor("operator", privileged=True))
    await projector.project([event("wf-1", "progressed", 5)])
    assert await _state(ledger, "wf-1") == (State.IN_PROGRESS, None, 2)
