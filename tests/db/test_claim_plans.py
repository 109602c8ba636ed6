"""The claim statements keep a cached generic plan.

A statement whose generic plan PostgreSQL costs above the plans it makes per call is
planned anew on every execution: for pull-next that was about a millisecond of the
server's CPU per claim, and 0.4x the hand-written claim's throughput under 16 claimers
(migration 0025 says why). pg_prepared_statements counts, per prepared statement of this
session, the plans made for it of each kind: after PostgreSQL's five custom plans, every
further execution must use the generic one. The tables are as a fresh ledger has them:
never analyzed except work_units, as after a bulk registration.
"""

from __future__ import annotations

import asyncpg

from work_ledger.db.connect import create_pool
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.domain.shape import CostRecord
from work_ledger.service.ledger import Ledger

RUNS = 12
# PostgreSQL plans the first five executions for their parameters before it weighs the
# generic plan (plancache.c); a kept generic plan serves every execution after them.
CUSTOM_FIRST = 5

EVIDENCE = "https://ci.example.com/runs/1"
PLANS = """
SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1
"""


async def _plans(raw: asyncpg.Connection, statement: str) -> tuple[int, int]:
    row = await raw.fetchrow(PLANS, statement)
    assert row is not None, "the statement was not prepared on this connection"
    return row["generic_plans"], row["custom_plans"]


async def _seed(raw: asyncpg.Connection, domain: str | None) -> None:
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, domain)"
        " SELECT 'plan-' || g, 'plans', $1 FROM generate_series(1, 200) AS g",
        domain or "any",
    )
    await raw.execute("ANALYZE work_units")


async def test_pull_next_keeps_its_generic_plan(raw: asyncpg.Connection) -> None:
    await _seed(raw, None)
    statement = QUERIES["claim_next_unit"]
    for i in range(RUNS):
        row = await raw.fetchrow(statement, f"planner-{i}", None, 60)
        assert row is not None, "the backlog ran dry"
        assert row["unit"] is not None, "the backlog ran dry"
    generic, custom = await _plans(raw, statement)
    assert (generic, custom) == (RUNS - CUSTOM_FIRST, CUSTOM_FIRST), (
        f"pull-next was planned {custom} times for its parameters in {RUNS} runs "
        f"({generic} generic): its generic plan looks dearer than a custom one"
    )


async def test_pull_next_in_a_domain_keeps_its_generic_plan(raw: asyncpg.Connection) -> None:
    await _seed(raw, "orders")
    statement = QUERIES["claim_next_unit"]
    for i in range(RUNS):
        row = await raw.fetchrow(statement, f"planner-{i}", "orders", 60)
        assert row is not None, "the backlog ran dry"
        assert row["unit"] is not None, "the backlog ran dry"
    assert await _plans(raw, statement) == (RUNS - CUSTOM_FIRST, CUSTOM_FIRST)


# 2,000 of the seeded units live at once, each held by an agent of its own: a raw edit past
# the claim's triggers, which only the statistics need to see.
GO_LIVE = """
UPDATE work_units
SET state = 'claimed', claimed_by = 'holder-' || external_ref, attempt_count = 1,
    lease_expires_at = now() + interval '1 hour', last_heartbeat_at = now()
WHERE id IN (SELECT id FROM work_units WHERE state = 'ready' ORDER BY created_at DESC
             LIMIT 2000)
"""


async def test_pull_next_keeps_its_generic_plan_as_units_go_live(
    raw: asyncpg.Connection,
) -> None:
    """A capped scope's live count was a subquery costed into every claim, its estimate
    growing with the live units ANALYZE counts: once they did, PostgreSQL weighed the
    dearer generic plan against the cheap custom plans of before and planned every claim
    anew, hundreds in a row (0031 counts them in a function). The plan cache keeps its
    generic plan through a rise of 2,000 live units."""
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet)"
        " SELECT 'plan-' || g, 'plans' FROM generate_series(1, 3000) AS g"
    )
    await raw.execute("ANALYZE work_units")
    statement = QUERIES["claim_next_unit"]
    for i in range(CUSTOM_FIRST + 1):
        await raw.fetchrow(statement, f"planner-{i}", None, 60)
    async with raw.transaction():
        await raw.execute("SET LOCAL session_replication_role = replica")
        await raw.execute(GO_LIVE)
    await raw.execute("ANALYZE work_units")
    _, custom_before = await _plans(raw, statement)
    for i in range(RUNS):
        row = await raw.fetchrow(statement, f"grown-{i}", None, 60)
        assert row is not None
        assert row["unit"] is not None, "the backlog ran dry"
    _, custom = await _plans(raw, statement)
    assert custom == custom_before, (
        f"pull-next was planned for its parameters {custom - custom_before} times in {RUNS} "
        "runs after the live units grew: its generic plan's estimate grew with them"
    )


async def test_a_units_life_runs_on_generic_plans(database_url: str) -> None:
    """Every statement of a unit's life (claim, start, heartbeat, cost, verify, dispose),
    run on one pooled connection as serve runs them, is planned for its parameters only
    PostgreSQL's first five times."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        ledger = Ledger(Store(pool), lease_seconds=60)
        operator = Actor("operator", privileged=True)
        await ledger.register(
            [NewUnit(f"life-{i}", "plans", "orders") for i in range(RUNS)], operator
        )
        for i in range(RUNS):
            agent = Actor(f"agent-{i}")
            claim = await ledger.claim(agent.name)
            assert claim.unit is not None
            assert claim.attempt is not None
            ref, attempt = claim.unit.external_ref, claim.attempt.id
            await ledger.start(ref, agent, attempt_id=attempt)
            await ledger.heartbeat(attempt, agent)
            await ledger.record_cost(attempt, CostRecord(125, model="m", input_tokens=3), agent)
            await ledger.verify(ref, agent, EVIDENCE, attempt_id=attempt)
            await ledger.dispose(ref, Disposition.MIGRATED, agent, attempt_id=attempt)
        async with pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
    finally:
        await pool.close()
    names = {sql: name for name, sql in QUERIES.items()}
    replanned = {
        names.get(r["statement"], r["statement"][:60]): r["custom_plans"]
        for r in rows
        if r["custom_plans"] > CUSTOM_FIRST
    }
    assert replanned == {}, f"planned for their parameters on every run: {replanned}"
