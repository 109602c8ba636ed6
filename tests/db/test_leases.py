"""Leases: heartbeats extend them, lapsed ones are reclaimed, and a lost claim is fenced off."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from work_ledger.domain.model import Actor, Claim, Disposition, NewUnit, Outcome, State
from work_ledger.errors import AttemptSuperseded, NotFound, NotHolder
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def expire(raw: asyncpg.Connection, ref: str) -> None:
    """Let the unit's lease lapse, as a dead agent's would."""
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 second',"
        " last_heartbeat_at = last_heartbeat_at - (lease_expires_at - now()) - interval '1 second'"
        " WHERE external_ref = $1",
        ref,
    )


@pytest.mark.parametrize("start", [False, True], ids=["claimed", "in_progress"])
async def test_stale_reclaim_supersedes_the_lapsed_attempt(
    ledger: Ledger, raw: asyncpg.Connection, start: bool
) -> None:
    """A lapsed lease (claimed or in_progress) goes to the next claimer as attempt 2."""
    await ledger.register([NewUnit("u-1", "fleet-a"), NewUnit("u-2", "fleet-a")], OPERATOR)
    first = await ledger.claim("agent-dead")
    assert first.unit is not None
    assert first.attempt is not None
    if start:
        await ledger.start("u-1", Actor("agent-dead"))
    await expire(raw, "u-1")

    second = await ledger.claim("agent-next")

    assert second.unit is not None
    assert second.attempt is not None
    assert (second.unit.external_ref, second.unit.state, second.unit.claimed_by) == (
        "u-1",
        State.CLAIMED,
        "agent-next",
    )
    assert (second.attempt.attempt_no, second.unit.attempt_count) == (2, 2)
    detail = await ledger.get_unit("u-1")
    assert [(a.attempt_no, a.agent_id, a.outcome) for a in detail.attempts] == [
        (1, "agent-dead", Outcome.SUPERSEDED),
        (2, "agent-next", None),
    ]
    event = (await ledger.list_events(unit_ref="u-1", limit=1)).items[0]
    from_state = State.IN_PROGRESS if start else State.CLAIMED
    assert (event.event_type, event.from_state, event.to_state, event.agent_id) == (
        "stale_reclaimed",
        from_state,
        State.CLAIMED,
        "agent-next",
    )
    assert event.detail == {
        "previous_agent": "agent-dead",
        "superseded_attempt_id": str(first.attempt.id),
    }
    assert (await ledger.get_unit("u-2")).unit.state is State.READY
    assert await ledger.audit() == []


async def test_named_claim_reclaims_a_lapsed_lease(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A named claim of a unit whose lease lapsed takes it over as a new attempt."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    await ledger.claim("agent-dead")
    await expire(raw, "u-1")
    claim = await ledger.claim_named("u-1", "agent-next")
    assert claim.attempt is not None
    assert (claim.attempt.attempt_no, claim.attempt.agent_id) == (2, "agent-next")


async def test_heartbeat_extends_the_lease(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A heartbeat moves the lease forward, so a lapsed-looking unit is no longer reclaimable."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    claim = await ledger.claim("agent-a", lease_seconds=30)
    assert claim.unit is not None
    assert claim.attempt is not None
    await expire(raw, "u-1")
    unit, attempt = await ledger.heartbeat(claim.attempt.id, Actor("agent-a"), lease_seconds=600)
    assert claim.unit.lease_expires_at is not None
    assert unit.lease_expires_at is not None
    assert unit.lease_expires_at > claim.unit.lease_expires_at
    remaining = await raw.fetchval(
        "SELECT extract(epoch FROM lease_expires_at - now()) FROM work_units"
    )
    assert 590 < remaining <= 600
    assert attempt.outcome is None
    assert (await ledger.claim("agent-b")).unit is None
    event = (await ledger.list_events(unit_ref="u-1", limit=1)).items[0]
    assert (event.event_type, event.attempt_id) == ("heartbeat", claim.attempt.id)


async def test_heartbeat_of_a_superseded_attempt_is_refused(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """The old holder's heartbeat after a reclaim is refused as attempt_superseded."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    old = await ledger.claim("agent-slow")
    assert old.attempt is not None
    await expire(raw, "u-1")
    await ledger.claim("agent-next")
    events = await raw.fetchval("SELECT count(*) FROM work_unit_events")

    with pytest.raises(AttemptSuperseded) as refused:
        await ledger.heartbeat(old.attempt.id, Actor("agent-slow"))

    assert refused.value.invariant == "attempt_superseded"
    assert refused.value.state == State.CLAIMED
    assert "claim another unit" in refused.value.detail
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == events
    unit = (await ledger.get_unit("u-1")).unit
    assert (unit.claimed_by, unit.attempt_count) == ("agent-next", 2)


async def test_fenced_writes_with_an_old_attempt_are_refused_for_the_same_agent(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """An agent holding its unit again under attempt 3 cannot write with attempt 1's id."""
    agent = Actor("agent-a")
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    old = await ledger.claim(agent.name)
    assert old.attempt is not None
    await expire(raw, "u-1")
    await ledger.claim("agent-b")
    await expire(raw, "u-1")
    new = await ledger.claim_named("u-1", agent.name)
    assert new.attempt is not None
    assert (new.attempt.attempt_no, new.resumed) == (3, False)
    stale = old.attempt.id
    writes = {
        "start": ledger.start("u-1", agent, attempt_id=stale),
        "release": ledger.release("u-1", agent, attempt_id=stale),
    }
    for name, write in writes.items():
        with pytest.raises(AttemptSuperseded) as refused:
            await write
        assert refused.value.invariant == "attempt_superseded", name
    await ledger.start("u-1", agent, attempt_id=new.attempt.id)
    later = {
        "verify": ledger.verify("u-1", agent, "https://ci.example/1", attempt_id=stale),
        "block": ledger.block("u-1", agent, "why?", attempt_id=stale),
        "dispose": ledger.dispose("u-1", Disposition.DROPPED, agent, attempt_id=stale),
    }
    for name, write in later.items():
        with pytest.raises(AttemptSuperseded) as refused:
            await write
        assert refused.value.invariant == "attempt_superseded", name
        assert refused.value.state == State.IN_PROGRESS
    unit = (await ledger.get_unit("u-1")).unit
    assert (unit.state, unit.claimed_by, unit.attempt_count) == (State.IN_PROGRESS, "agent-a", 3)
    assert await ledger.audit() == []


async def test_only_the_holder_verifies(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """Another agent cannot verify a unit in progress, even with the holder's attempt id;
    the refusal writes nothing and the holder then verifies it."""
    holder, other = Actor("agent-a"), Actor("agent-b")
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    claim = await ledger.claim(holder.name)
    assert claim.attempt is not None
    await ledger.start("u-1", holder)
    events = await raw.fetchval("SELECT count(*) FROM work_unit_events")
    for attempt_id in (None, claim.attempt.id):
        with pytest.raises(NotHolder):
            await ledger.verify("u-1", other, "https://ci.example/1", attempt_id=attempt_id)
    assert (await ledger.get_unit("u-1")).unit.state is State.IN_PROGRESS
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == events
    unit, attempt = await ledger.verify("u-1", holder, "https://ci.example/1")
    assert (unit.state, attempt.outcome, attempt.evidence_url) == (
        State.VERIFIED,
        Outcome.VERIFIED,
        "https://ci.example/1",
    )


async def test_only_the_verifier_disposes_migrated_and_only_with_its_attempt(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A verified unit is closed MIGRATED by the agent whose attempt verified it, fenced by
    that attempt: an earlier attempt's id, even the same agent's, and another agent who
    once held the unit are refused, writing nothing."""
    agent, other = Actor("agent-a"), Actor("agent-b")
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    first = await ledger.claim(agent.name)
    await expire(raw, "u-1")
    await ledger.claim(other.name)
    await expire(raw, "u-1")
    last = await ledger.claim_named("u-1", agent.name)
    assert first.attempt is not None
    assert last.attempt is not None
    await ledger.start("u-1", agent, attempt_id=last.attempt.id)
    await ledger.verify("u-1", agent, "https://ci.example/1", attempt_id=last.attempt.id)
    events = await raw.fetchval("SELECT count(*) FROM work_unit_events")

    with pytest.raises(AttemptSuperseded):
        await ledger.dispose("u-1", Disposition.MIGRATED, agent, attempt_id=first.attempt.id)
    with pytest.raises(NotHolder):
        await ledger.dispose("u-1", Disposition.MIGRATED, other)
    assert (await ledger.get_unit("u-1")).unit.state is State.VERIFIED
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == events

    done = await ledger.dispose("u-1", Disposition.MIGRATED, agent, attempt_id=last.attempt.id)
    assert (done.state, done.disposition, done.claimed_by) == (
        State.DONE,
        Disposition.MIGRATED,
        None,
    )
    event = (await ledger.list_events(unit_ref="u-1", limit=1)).items[0]
    assert (event.event_type, event.from_state, event.to_state, event.attempt_id) == (
        "disposed",
        State.VERIFIED,
        State.DONE,
        last.attempt.id,
    )
    assert event.detail == {"disposition": "MIGRATED", "ended_attempt": False}
    assert await ledger.audit() == []


async def test_register_again_is_a_no_op_by_external_ref(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Registering a known external_ref again changes nothing and appends no event."""
    first = await ledger.register([NewUnit("u-1", "fleet-a", "orders")], OPERATOR)
    await ledger.claim("agent-a")
    before = await raw.fetchrow("SELECT u::text AS unit FROM work_units AS u")
    events = await raw.fetchval("SELECT count(*) FROM work_unit_events")

    again = await ledger.register(
        [NewUnit("u-1", "fleet-b", "billing"), NewUnit("u-2", "fleet-b")], OPERATOR
    )

    assert [(r.id, r.external_ref, r.created) for r in again] == [
        (first[0].id, "u-1", False),
        (again[1].id, "u-2", True),
    ]
    after = await raw.fetchrow(
        "SELECT u::text AS unit FROM work_units AS u WHERE id = $1", first[0].id
    )
    assert after == before
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == events + 1


async def test_unknown_unit_is_not_found_and_nothing_is_written(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Every unit write naming an unknown unit or attempt is NotFound, with no row written."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    events = await raw.fetchval("SELECT count(*) FROM work_unit_events")
    ghost, agent = str(uuid.uuid4()), Actor("agent-a")
    writes = [
        ledger.claim_named("no-such-unit", agent.name),
        ledger.claim_named(ghost, agent.name),
        ledger.start("no-such-unit", agent),
        ledger.start(ghost, OPERATOR),
        ledger.verify(ghost, agent, "https://ci.example/1"),
        ledger.release(ghost, OPERATOR),
        ledger.block(ghost, agent, "why?"),
        ledger.unblock(ghost, "because", OPERATOR),
        ledger.dispose(ghost, Disposition.DEAD, OPERATOR),
        ledger.heartbeat(uuid.uuid4(), agent),
        ledger.record_cost(uuid.uuid4(), 10, agent),
        ledger.cancel_question(uuid.uuid4(), OPERATOR),
        ledger.get_unit(ghost),
    ]
    for write in writes:
        with pytest.raises(NotFound):
            await write
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == events
    assert await raw.fetchval("SELECT count(*) FROM work_units") == 1


async def test_claim_serves_a_batch_in_its_own_order(ledger: Ledger) -> None:
    """Pull-next hands out a batch's units in the order the batch listed them, then the next."""
    refs = ["zeta", "alpha", "mu", "beta"]
    await ledger.register([NewUnit(r, "fleet-a") for r in refs], OPERATOR)
    await ledger.register([NewUnit("aardvark", "fleet-a")], OPERATOR)
    claimed = []
    for i in range(5):
        claim = await ledger.claim(f"agent-{i}")
        assert claim.unit is not None
        claimed.append(claim.unit.external_ref)
    assert claimed == [*refs, "aardvark"]


async def test_asking_again_renews_a_lapsed_lease(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A resumed claim is a sign of life: the lapsed lease is renewed and a heartbeat logged."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    first = await ledger.claim("agent-a", lease_seconds=60)
    await expire(raw, "u-1")

    again = await ledger.claim("agent-a", lease_seconds=60)
    stolen = await ledger.claim("agent-b")

    assert again.resumed
    assert again.attempt is not None
    assert first.attempt is not None
    assert again.attempt.id == first.attempt.id
    assert stolen == Claim(None, None)
    lapsed = await raw.fetchval(
        "SELECT lease_expires_at < now() FROM work_units WHERE external_ref = 'u-1'"
    )
    assert lapsed is False
    event = (await ledger.list_events(unit_ref="u-1", limit=1)).items[0]
    assert (event.event_type, event.detail["resumed"]) == ("heartbeat", True)


async def test_start_renews_the_lease_at_its_granted_length(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Starting after the lease lapsed (nobody reclaimed it) restarts it at the same length."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    await ledger.claim("agent-a", lease_seconds=600)
    await expire(raw, "u-1")

    unit, _ = await ledger.start("u-1", Actor("agent-a"))

    assert unit.lease_expires_at is not None
    assert unit.last_heartbeat_at is not None
    granted = (unit.lease_expires_at - unit.last_heartbeat_at).total_seconds()
    assert granted == pytest.approx(600, abs=1)
