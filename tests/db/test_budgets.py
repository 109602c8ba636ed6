"""Budgets decided by the claim: 64 agents claiming and recording cost into one scope as
it crosses its cap; no new claim once the crossing has committed, no cost refused."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from support.racing import racing_ledgers
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.errors import BudgetExhausted, InvalidInput
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
AGENTS = 64
CAP = 600
CENTS = 7


async def test_64_agents_cross_the_cap(database_url: str, raw: asyncpg.Connection) -> None:
    """Each agent claims, records cost and finishes until nothing is claimable; once the
    scope's recorded cost (all returned) reached the cap, no claim sent later succeeds."""
    async with racing_ledgers(database_url, AGENTS) as ledgers:
        refs = [f"u{i:04d}" for i in range(1000)]
        await ledgers[0].register([NewUnit(r, "fleet-a", "hot") for r in refs], OPERATOR)
        await ledgers[0].register([NewUnit("elsewhere", "fleet-a", "cold")], OPERATOR)
        await ledgers[0].set_budget("fleet-a", CAP, OPERATOR, domain="hot")
        returned = 0
        crossed_at: float | None = None
        late_claims: list[str] = []

        async def agent(ledger: Ledger, name: str) -> None:
            nonlocal returned, crossed_at
            actor = Actor(name)
            while True:
                sent = time.monotonic()
                claim = await ledger.claim(name, domain="hot")
                if claim.unit is None:
                    return
                if crossed_at is not None and sent > crossed_at:
                    late_claims.append(claim.unit.external_ref)
                assert claim.attempt is not None
                await ledger.start(claim.unit.external_ref, actor)
                await ledger.record_cost(claim.attempt.id, CENTS, actor)
                returned += CENTS
                if returned >= CAP and crossed_at is None:
                    crossed_at = time.monotonic()
                # Held work goes on past the cap: a second record, verify, dispose.
                await ledger.record_cost(claim.attempt.id, 1, actor)
                returned += 1
                await ledger.verify(claim.unit.external_ref, actor, "https://ci.example/1")
                await ledger.dispose(claim.unit.external_ref, Disposition.MIGRATED, actor)

        await asyncio.gather(*(agent(ledgers[n], f"agent-{n}") for n in range(AGENTS)))
        assert late_claims == []
        spent = await raw.fetchval("SELECT sum(cost_cents) FROM work_units WHERE domain = 'hot'")
        assert spent == returned >= CAP
        [budget] = await ledgers[0].list_budgets()
        assert (budget.spent_cents, budget.remaining_cents) == (spent, 0)
        claimed = await raw.fetchval(
            "SELECT count(*) FROM work_units WHERE domain = 'hot' AND state = 'done'"
        )
        # Every claim that saw room could spend; at most the 64 in flight overshoot.
        assert CAP // (CENTS + 1) <= claimed <= CAP // (CENTS + 1) + AGENTS
        with pytest.raises(BudgetExhausted) as refused:
            await ledgers[1].claim_named("u0999", "late-agent")
        assert refused.value.extra["cap_cents"] == CAP
        assert refused.value.extra["domain"] == "hot"
        other = await ledgers[2].claim("cold-agent")
        assert other.unit is not None
        assert other.unit.external_ref == "elsewhere"
        assert await ledgers[0].audit() == []


async def test_fleet_budget_covers_every_domain_and_raising_reopens(ledger: Ledger) -> None:
    """A fleet-wide budget stops each of its domains; a cap of 0 stops all; raising it
    reopens; a bad cap is refused."""
    await ledger.register([NewUnit("a", "f", "x"), NewUnit("b", "f", "y")], OPERATOR)
    await ledger.set_budget("f", 0, OPERATOR)
    assert (await ledger.claim("agent-1")).unit is None
    await ledger.set_budget("f", 10, OPERATOR)
    assert (await ledger.claim("agent-1")).unit is not None
    with pytest.raises(InvalidInput):
        await ledger.set_budget("f", -1, OPERATOR)


async def test_raw_sql_spend_follows_the_units(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """The scope's spend is kept by the database from the units' cost, whatever writes it."""
    await ledger.register([NewUnit("a", "f", "x")], OPERATOR)
    claim = await ledger.claim("agent-1")
    assert claim.attempt is not None
    await ledger.record_cost(claim.attempt.id, 40, Actor("agent-1"))
    await ledger.set_budget("f", 40, OPERATOR, domain="x")
    rows = await raw.fetch("SELECT fleet, domain, cap_cents, spent_cents, exhausted FROM v_budget")
    assert [tuple(r) for r in rows] == [("f", "x", 40, 40, True)]
    with pytest.raises(asyncpg.CheckViolationError):
        await raw.execute("UPDATE budgets SET cap_cents = -5")


async def test_spent_budget_stops_stale_reclaims(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A lapsed lease in a spent scope is not reclaimed; raising the cap lets it be."""
    await ledger.register([NewUnit("a", "f", "x")], OPERATOR)
    claim = await ledger.claim("agent-1")
    assert claim.attempt is not None
    await ledger.record_cost(claim.attempt.id, 50, Actor("agent-1"))
    await ledger.set_budget("f", 50, OPERATOR)
    await raw.execute("UPDATE work_units SET lease_expires_at = now() - interval '1 second'")
    assert (await ledger.claim("agent-2")).unit is None
    with pytest.raises(BudgetExhausted):
        await ledger.claim_named("a", "agent-2")
    await ledger.set_budget("f", 51, OPERATOR)
    reclaimed = await ledger.claim("agent-2")
    assert reclaimed.unit is not None
    assert reclaimed.unit.claimed_by == "agent-2"
