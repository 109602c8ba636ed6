"""The claim under real races: many connections, one ledger, every unit claimed once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from asyncpg import Pool

from support.racing import racing_ledgers
from work_ledger.db.queries import QUERIES
from work_ledger.domain.model import Actor, Claim, NewUnit, State
from work_ledger.errors import AttemptSuperseded, InvariantViolation
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
CLAIMERS = 64
UNITS_PER_ROUND = 20
ROUNDS = 50


@pytest.fixture
async def ledgers(database_url: str) -> AsyncIterator[list[Ledger]]:
    """CLAIMERS ledgers, each over a pool of one connection of its own, so claims truly race."""
    async with racing_ledgers(database_url, CLAIMERS) as ledgers:
        yield ledgers


async def _register(ledger: Ledger, prefix: str, count: int) -> set[str]:
    refs = [f"{prefix}-{i:03d}" for i in range(count)]
    await ledger.register([NewUnit(ref, "fleet-a", "orders") for ref in refs], OPERATOR)
    return set(refs)


def _won(claims: list[Claim]) -> list[Claim]:
    return [c for c in claims if c.unit is not None]


async def test_claim_two_connections_race_for_one_unit_exactly_one_wins(
    ledgers: list[Ledger],
) -> None:
    """Two connections claiming the only ready unit at once: one gets it, the other nothing."""
    first, second = ledgers[0], ledgers[1]
    for round_no in range(20):
        await _register(first, f"race-{round_no}", 1)
        claims = await asyncio.gather(first.claim(f"a-{round_no}"), second.claim(f"b-{round_no}"))
        winners = _won(list(claims))
        assert len(winners) == 1
        assert winners[0].unit is not None
        assert winners[0].unit.external_ref == f"race-{round_no}-000"
        assert winners[0].resumed is False


async def test_claim_skips_a_unit_locked_by_an_open_claim(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A claim still in flight on another connection hides its unit; nobody waits on it."""
    await _register(ledger, "locked", 1)
    async with raw.transaction():
        row = await raw.fetchrow(QUERIES["claim_unit"], "agent-a", None, 60, None)
        assert row is not None
        assert (row["unit"]["external_ref"], row["resumed"]) == ("locked-000", False)
        assert await asyncio.wait_for(ledger.claim("agent-b"), timeout=5) == Claim(None, None)
    # Committed: the unit is agent-a's, and a later claim still finds nothing.
    assert (await ledger.get_unit("locked-000")).unit.claimed_by == "agent-a"
    assert await ledger.claim("agent-b") == Claim(None, None)


async def test_named_claim_of_a_unit_being_claimed_says_so(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A named claim of a unit another claim has locked right now is refused, saying why."""
    await _register(ledger, "busy", 1)
    async with raw.transaction():
        assert await raw.fetchrow(QUERIES["claim_unit"], "agent-a", None, 60, None) is not None
        with pytest.raises(InvariantViolation) as refused:
            await asyncio.wait_for(ledger.claim_named("busy-000", "agent-b"), timeout=5)
    assert refused.value.invariant == "unit_claimed_only_when_claimable"
    assert "being claimed by another agent" in refused.value.detail
    assert (await ledger.get_unit("busy-000")).unit.claimed_by == "agent-a"


async def test_claim_64_claimers_vs_20_units_claim_each_unit_once(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """64 agents on 64 connections vs 20 ready units, 50 rounds: 20 distinct winners, 44 empty."""
    for round_no in range(ROUNDS):
        refs = await _register(ledgers[0], f"r{round_no:02d}", UNITS_PER_ROUND)
        claims = await asyncio.gather(
            *(ledger.claim(f"r{round_no:02d}-agent-{i:02d}") for i, ledger in enumerate(ledgers))
        )
        winners = _won(list(claims))
        claimed = [c.unit.external_ref for c in winners if c.unit is not None]
        assert len(winners) == UNITS_PER_ROUND
        assert sorted(claimed) == sorted(refs)
        assert len({c.attempt.id for c in winners if c.attempt is not None}) == UNITS_PER_ROUND
        assert not any(c.resumed for c in winners)
        assert sum(c.unit is None and c.attempt is None for c in claims) == CLAIMERS - len(refs)
    totals = await raw.fetchrow(
        "SELECT count(*) FILTER (WHERE state = 'claimed') AS claimed,"
        " count(*) FILTER (WHERE attempt_count = 1) AS once,"
        " count(DISTINCT claimed_by) AS holders,"
        " (SELECT count(*) FROM work_unit_attempts) AS attempts,"
        " (SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed') AS events"
        " FROM work_units"
    )
    expected = ROUNDS * UNITS_PER_ROUND
    assert dict(totals) == {
        "claimed": expected,
        "once": expected,
        "holders": expected,
        "attempts": expected,
        "events": expected,
    }
    assert await ledgers[0].audit() == []


async def test_claim_same_agent_twice_at_once_gets_one_unit(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """One agent claiming on two connections at once holds one unit; the other claim resumes it."""
    for round_no in range(20):
        await _register(ledgers[0], f"twice-{round_no:02d}", 2)
        agent = f"agent-twice-{round_no:02d}"
        one, two = await asyncio.gather(ledgers[0].claim(agent), ledgers[1].claim(agent))
        assert one.unit is not None
        assert two.unit is not None
        assert one.unit.id == two.unit.id
        assert one.attempt == two.attempt
        assert sorted([one.resumed, two.resumed]) == [False, True]
    held = await raw.fetch(
        "SELECT claimed_by, count(*) AS n FROM work_units WHERE state = $1 GROUP BY claimed_by",
        State.CLAIMED,
    )
    assert len(held) == 20
    assert {r["n"] for r in held} == {1}
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE state = 'ready'") == 20
    assert await ledgers[0].audit() == []


async def test_register_overlapping_batches_at_once_create_each_unit_once(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Batches sharing refs in opposite orders, registered at once: each unit exists once."""
    for round_no in range(10):
        refs = [f"reg-{round_no}-{i:03d}" for i in range(200)]
        batches = [refs[:150], list(reversed(refs[50:])), refs[25:175]]
        results = await asyncio.gather(
            *(
                ledger.register([NewUnit(r, "fleet-a") for r in batch], OPERATOR)
                for ledger, batch in zip(ledgers, batches, strict=False)
            )
        )
        ids: dict[str, uuid.UUID] = {}
        for batch, result in zip(batches, results, strict=True):
            assert [r.external_ref for r in result] == batch
            for r in result:
                assert ids.setdefault(r.external_ref, r.id) == r.id
        assert sum(r.created for result in results for r in result) == len(refs)
    assert await raw.fetchval("SELECT count(*) FROM work_units") == 2000
    registered = "SELECT count(*) FROM work_unit_events WHERE event_type = 'registered'"
    assert await raw.fetchval(registered) == 2000


async def test_heartbeat_racing_a_stale_reclaim_one_of_them_wins(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """The old holder's heartbeat and another agent's reclaim at once: never both, never stuck."""
    for round_no in range(20):
        ref = f"hb-{round_no:02d}"
        await _register(ledgers[0], ref, 1)
        old = await ledgers[0].claim(f"old-{round_no}")
        assert old.attempt is not None
        await raw.execute(
            "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
            " WHERE external_ref = $1",
            f"{ref}-000",
        )
        beat, claim = await asyncio.gather(
            ledgers[1].heartbeat(old.attempt.id, Actor(f"old-{round_no}")),
            ledgers[2].claim(f"new-{round_no}"),
            return_exceptions=True,
        )
        unit = (await ledgers[0].get_unit(f"{ref}-000")).unit
        if isinstance(beat, BaseException):
            assert isinstance(beat, AttemptSuperseded), beat
            assert isinstance(claim, Claim)
            assert claim.attempt is not None
            assert (unit.claimed_by, unit.attempt_count) == (f"new-{round_no}", 2)
        else:
            assert claim == Claim(None, None)
            assert (unit.claimed_by, unit.attempt_count) == (f"old-{round_no}", 1)
    assert await ledgers[0].audit() == []


async def test_claim_same_agent_four_times_at_once_gets_one_unit(ledgers: list[Ledger]) -> None:
    """Four simultaneous claims by one agent: one new attempt, three resumed, none refused."""
    for round_no in range(10):
        await _register(ledgers[0], f"four-{round_no:02d}", 4)
        agent = f"agent-four-{round_no:02d}"
        claims = await asyncio.gather(*(ledger.claim(agent) for ledger in ledgers[:4]))
        assert len({c.unit.id for c in claims if c.unit is not None}) == 1
        assert len({c.attempt.id for c in claims if c.attempt is not None}) == 1
        assert sorted(c.resumed for c in claims) == [False, True, True, True]
    assert await ledgers[0].audit() == []


async def _until_a_statement_waits_for_a_lock(pool: Pool) -> None:
    for _ in range(400):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if waiting:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the start never waited for the reclaim's row lock")


@pytest.mark.parametrize("round_no", range(3))
async def test_fenced_start_waiting_on_a_stale_reclaim_is_refused_when_it_commits(
    ledger: Ledger, raw: asyncpg.Connection, pool: Pool, round_no: int
) -> None:
    """A privileged start fenced by the old attempt, queued behind the reclaim that supersedes
    it, re-checks the unit's new row and refuses; the new holder keeps its claim."""
    ref = f"fence-{round_no}"
    await _register(ledger, ref, 1)
    old = await ledger.claim(f"dead-{round_no}")
    assert old.attempt is not None
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
        " WHERE external_ref = $1",
        f"{ref}-000",
    )
    async with raw.transaction():
        row = await raw.fetchrow(QUERIES["claim_unit"], f"next-{round_no}", None, 60, None)
        assert row is not None
        assert row["attempt"]["attempt_no"] == 2
        start = asyncio.create_task(ledger.start(f"{ref}-000", OPERATOR, attempt_id=old.attempt.id))
        await _until_a_statement_waits_for_a_lock(pool)
    with pytest.raises(AttemptSuperseded):
        await asyncio.wait_for(start, timeout=10)
    unit = (await ledger.get_unit(f"{ref}-000")).unit
    assert (unit.state, unit.claimed_by, unit.attempt_count) == (
        State.CLAIMED,
        f"next-{round_no}",
        2,
    )
    assert await ledger.audit() == []
