"""The flow controls under real races (DESIGN §13): 64 claimers on 64 connections, many
rounds. No claim passes a cap, no key has two holders, no claim commits in a scope after
its pause committed, and every request is answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from support.racing import racing_ledgers
from work_ledger.domain.flow import ControlChange
from work_ledger.domain.model import Actor, Claim, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
CLAIMERS = 64
# Every request is answered well within this (a deadlock would hold one forever).
ANSWERED_WITHIN = 120

LIVE = "SELECT count(*) FROM work_units WHERE fleet = $1 AND state IN ('claimed', 'in_progress')"


@pytest.fixture
async def ledgers(database_url: str) -> AsyncIterator[list[Ledger]]:
    """CLAIMERS ledgers, each over a pool of one connection of its own, so claims truly race."""
    async with racing_ledgers(database_url, CLAIMERS) as ledgers:
        yield ledgers


async def _claim_all(ledgers: list[Ledger], prefix: str) -> list[Claim]:
    return list(
        await asyncio.wait_for(
            asyncio.gather(*(lg.claim(f"{prefix}-{i:02d}") for i, lg in enumerate(ledgers))),
            ANSWERED_WITHIN,
        )
    )


def _refs(claims: list[Claim]) -> list[str]:
    return [c.unit.external_ref for c in claims if c.unit is not None]


async def test_64_claimers_against_a_cap_of_5_admit_exactly_5(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Each round a new fleet capped at 5 with 20 ready units; earlier fleets, at their cap,
    keep ready units that every claim must skip. Exactly 5 claims win each round."""
    for round_no in range(25):
        fleet = f"capped-{round_no:02d}"
        await ledgers[0].set_controls(ControlChange(fleet, "ramp", max_live=5), OPERATOR)
        await ledgers[0].register([NewUnit(f"{fleet}-{i:02d}", fleet) for i in range(20)], OPERATOR)
        claims = await _claim_all(ledgers, f"agent-{round_no:02d}")
        won = _refs(claims)
        assert len(won) == 5, won
        assert all(ref.startswith(fleet) for ref in won)
        assert await raw.fetchval(LIVE, fleet) == 5
    over = await raw.fetchval(
        "SELECT count(*) FROM (SELECT fleet FROM work_units"
        " WHERE state IN ('claimed', 'in_progress') GROUP BY fleet HAVING count(*) > 5) AS o"
    )
    assert over == 0
    assert await ledgers[0].audit() == []


async def test_overlapping_key_sets_one_holder_no_deadlock(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """{a,b}, {b,c}, {c,a}: any two share a key, so one of the three is held at a time;
    64 claimers at once are all answered (keys are taken in sorted order)."""
    for round_no in range(20):
        a, b, c = (f"r{round_no}-{k}" for k in "abc")
        await ledgers[0].register(
            [
                NewUnit(f"ab-{round_no:02d}", "keys", exclusive=(a, b)),
                NewUnit(f"bc-{round_no:02d}", "keys", exclusive=(b, c)),
                NewUnit(f"ca-{round_no:02d}", "keys", exclusive=(c, a)),
            ],
            OPERATOR,
        )
        claims = await _claim_all(ledgers, f"agent-{round_no:02d}")
        won = _refs(claims)
        assert len(won) == 1, won
        held = await raw.fetch(
            "SELECT h.key, u.external_ref FROM held_keys AS h JOIN work_units AS u"
            " ON u.id = h.unit_id WHERE h.key LIKE $1",
            f"r{round_no}-%",
        )
        assert {r["external_ref"] for r in held} == set(won)
        assert len(held) == 2
    assert await ledgers[0].audit() == []


async def test_overlapping_key_sets_named_claims_at_once(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Named claims of the three units, many at once: one wins, every other is refused."""
    for round_no in range(20):
        a, b, c = (f"n{round_no}-{k}" for k in "abc")
        refs = [f"nab-{round_no:02d}", f"nbc-{round_no:02d}", f"nca-{round_no:02d}"]
        keys = [(a, b), (b, c), (c, a)]
        await ledgers[0].register(
            [NewUnit(ref, "named", exclusive=k) for ref, k in zip(refs, keys, strict=True)],
            OPERATOR,
        )
        results = await asyncio.wait_for(
            asyncio.gather(
                *(
                    lg.claim_named(refs[i % 3], f"named-{round_no:02d}-{i:02d}")
                    for i, lg in enumerate(ledgers[:30])
                ),
                return_exceptions=True,
            ),
            ANSWERED_WITHIN,
        )
        won = [r for r in results if isinstance(r, Claim)]
        assert len(won) == 1, results
        for refused in results:
            if not isinstance(refused, Claim):
                assert getattr(refused, "invariant", None) in {
                    "exclusive_key_held",
                    "unit_claimed_only_when_claimable",
                }, refused
    live = "SELECT count(*) FROM work_units WHERE fleet = 'named' AND state = 'claimed'"
    assert await raw.fetchval(live) == 20


async def test_a_pause_racing_64_claimers_no_claim_commits_after_it(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """The pause and 64 claims at once: the live count read right after the pause commits
    is the final one, and the scope stays closed."""
    operator = ledgers[0]
    for round_no in range(20):
        fleet = f"paused-{round_no:02d}"
        await operator.set_controls(ControlChange(fleet, "watched", paused=False), OPERATOR)
        await operator.register([NewUnit(f"{fleet}-{i:02d}", fleet) for i in range(80)], OPERATOR)

        async def pause(fleet: str = fleet, delay: float = 0.002 * (round_no % 5)) -> int:
            await asyncio.sleep(delay)
            await raw.execute(
                "UPDATE controls SET paused = true, paused_since = now(), pause_reason = 'x'"
                " WHERE fleet = $1 AND domain IS NULL",
                fleet,
            )
            live_at_pause: int = await raw.fetchval(LIVE, fleet)
            return live_at_pause

        live_at_pause, *_ = await asyncio.wait_for(
            asyncio.gather(
                pause(),
                *(lg.claim(f"p{round_no:02d}-{i:02d}") for i, lg in enumerate(ledgers[1:])),
            ),
            ANSWERED_WITHIN,
        )
        assert await raw.fetchval(LIVE, fleet) == live_at_pause
        assert (await operator.claim(f"late-{round_no:02d}")).unit is None


async def test_a_cap_lowered_under_load_admits_nothing_past_it(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    operator = ledgers[0]
    for round_no in range(15):
        fleet = f"lowered-{round_no:02d}"
        await operator.set_controls(ControlChange(fleet, "ramp", max_live=40), OPERATOR)
        await operator.register([NewUnit(f"{fleet}-{i:02d}", fleet) for i in range(80)], OPERATOR)

        async def lower(fleet: str = fleet, delay: float = 0.002 * (round_no % 5)) -> int:
            await asyncio.sleep(delay)
            await operator.set_controls(ControlChange(fleet, "too fast", max_live=3), OPERATOR)
            live_at_lowering: int = await raw.fetchval(LIVE, fleet)
            return live_at_lowering

        live_at_lowering, *_ = await asyncio.wait_for(
            asyncio.gather(
                lower(),
                *(lg.claim(f"l{round_no:02d}-{i:02d}") for i, lg in enumerate(ledgers[1:])),
            ),
            ANSWERED_WITHIN,
        )
        final = await raw.fetchval(LIVE, fleet)
        assert final <= max(live_at_lowering, 3)
        assert final <= 40


async def test_lapsed_leases_keep_their_keys_while_others_want_them(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """A unit whose lease lapsed still holds its key: the reclaim takes it over, and the
    other unit sharing the key stays ready."""
    operator = ledgers[0]
    for round_no in range(15):
        key = f"module-{round_no}"
        old, wanting = f"old-{round_no:02d}", f"want-{round_no:02d}"
        await operator.register([NewUnit(old, "lapse", exclusive=(key,))], OPERATOR)
        first = await operator.claim_named(old, f"dead-{round_no:02d}")
        assert first.unit is not None
        await operator.register([NewUnit(wanting, "lapse", exclusive=(key,))], OPERATOR)
        await raw.execute(
            "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
            " WHERE external_ref = $1",
            old,
        )
        claims = await _claim_all(ledgers, f"reclaim-{round_no:02d}")
        assert _refs(claims) == [old]
        assert (
            await raw.fetchval("SELECT state FROM work_units WHERE external_ref = $1", wanting)
            == "ready"
        )
        holder = await raw.fetchval(
            "SELECT u.external_ref FROM held_keys AS h JOIN work_units AS u"
            " ON u.id = h.unit_id WHERE h.key = $1",
            key,
        )
        assert holder == old
    assert await operator.audit() == []
