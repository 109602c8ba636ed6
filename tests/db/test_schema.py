"""The schema the migrations build: the map agrees with domain.py, the claim uses its index,
and migrations apply once however many processes start at the same time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.db.migrate import apply_migrations, load_migrations
from work_ledger.db.queries import QUERIES
from work_ledger.domain.model import (
    DISPOSITIONS_FROM,
    TRANSITIONS,
    Actor,
    Attempt,
    NewUnit,
    Question,
    State,
    Unit,
)
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def test_domain_transitions_equal_wl_next_states(raw: asyncpg.Connection) -> None:
    """domain.TRANSITIONS and the database's wl_next_states agree for every state."""
    in_db = {
        State(r["state"]): frozenset(State(s) for s in r["next"])
        for r in await raw.fetch(
            "SELECT s::text AS state, wl_next_states(s)::text[] AS next"
            " FROM unnest(enum_range(NULL::work_state)) AS s"
        )
    }
    assert in_db == TRANSITIONS


async def test_domain_dispositions_agree_with_wl_abandon_dispositions(
    raw: asyncpg.Connection,
) -> None:
    """DISPOSITIONS_FROM, minus MIGRATED (a CHECK ties it to done), is wl_abandon_dispositions."""
    in_db = {
        State(r["state"]): set(r["dispositions"])
        for r in await raw.fetch(
            "SELECT s::text AS state, wl_abandon_dispositions(s)::text[] AS dispositions"
            " FROM unnest(enum_range(NULL::work_state)) AS s"
        )
    }
    in_domain = {
        state: {str(d) for d in DISPOSITIONS_FROM.get(state, frozenset()) if d != "MIGRATED"}
        for state in State
    }
    assert in_db == in_domain
    migrated_from = {s for s, ds in DISPOSITIONS_FROM.items() if "MIGRATED" in ds}
    assert migrated_from == {s for s, ts in TRANSITIONS.items() if State.DONE in ts}


# A ready unit's mark of a pause (0032): pull-next's indexes read it, no answer does.
DATABASE_ONLY = {"work_units": ["in_paused_scope"]}


@pytest.mark.parametrize(
    ("table", "record"),
    [("work_units", Unit), ("work_unit_attempts", Attempt), ("blocking_questions", Question)],
)
async def test_records_declare_their_tables_columns_in_order(
    raw: asyncpg.Connection, table: str, record: type[Any]
) -> None:
    """Unit, Attempt and Question are built by position from their table's row values, so
    each declares exactly its table's columns, in the table's order, but for the last ones
    that the database keeps for its own use (`from_record` leaves them off)."""
    columns = await raw.fetchval(
        "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute"
        " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
        table,
    )
    assert columns == list(record.__dataclass_fields__) + DATABASE_ONLY.get(table, [])


async def test_enums_match_the_domain(raw: asyncpg.Connection) -> None:
    """The work_state enum has exactly the states of domain.State, in the same order."""
    values = await raw.fetchval("SELECT enum_range(NULL::work_state)::text[]")
    assert values == [str(s) for s in State]


def _index_names(plan: Any) -> Iterator[str]:
    if isinstance(plan, dict):
        if "Index Name" in plan:
            yield plan["Index Name"]
        for value in plan.values():
            yield from _index_names(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _index_names(value)


# The pull-next statements the service runs (claim_next_unit first, claim_unit when the
# agent holds a claim or a lease lapsed), as a connection prepares and caches them.
PULL_NEXT = ["claim_next_unit", "claim_unit"]


async def _prepare_claim(raw: asyncpg.Connection, statement: str) -> None:
    types = "text, text, int" + (", uuid" if statement == "claim_unit" else "")
    await raw.execute(f"PREPARE claim({types}) AS " + QUERIES[statement])


def _execute_claim(statement: str, agent: str, domain: str | None) -> str:
    target = "NULL" if domain is None else f"'{domain}'"
    named = ", NULL" if statement == "claim_unit" else ""
    return f"EXECUTE claim('{agent}', {target}, 60{named})"


@pytest.mark.parametrize("statement", PULL_NEXT)
@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_claim_plan_uses_the_partial_ready_index(
    ledger: Ledger, raw: asyncpg.Connection, plan_mode: str, statement: str
) -> None:
    """With thousands of ready units, pull-next walks work_units_ready_idx, even when cached
    (claim_unit through wl_next_open_unit, whose plans EXPLAIN does not show)."""
    for batch in range(3):
        await ledger.register(
            [NewUnit(f"b{batch}-{i:04d}", "fleet-a", "orders") for i in range(1000)], OPERATOR
        )
    for i in range(20):
        await ledger.claim(f"agent-{i}")
    await raw.execute("ANALYZE")
    await raw.execute(f"SET plan_cache_mode = {plan_mode}")
    # Bound parameters always get a custom plan; a PREPAREd statement shows the cached one.
    await _prepare_claim(raw, statement)
    plan = await raw.fetchval("EXPLAIN (FORMAT JSON) " + _execute_claim(statement, "x", None))
    indexes = set(_index_names(plan))
    if statement == "claim_next_unit":
        assert "work_units_ready_idx" in indexes, indexes
    assert "work_units_leased_idx" in indexes, indexes


def _rows_touched(plan: Any) -> int:
    """Rows every node of an EXPLAIN ANALYZE plan produced or filtered out."""
    if isinstance(plan, list):
        return sum(_rows_touched(value) for value in plan)
    if not isinstance(plan, dict):
        return 0
    own = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return own + sum(_rows_touched(v) for v in plan.values() if isinstance(v, list | dict))


@pytest.mark.parametrize("statement", PULL_NEXT)
@pytest.mark.parametrize("domain", [None, "orders"])
async def test_cached_claim_plan_reads_a_handful_of_rows(
    ledger: Ledger, raw: asyncpg.Connection, domain: str | None, statement: str
) -> None:
    """A generic (cached) claim plan touches a few rows, not the whole ready queue nor
    every running attempt."""
    for batch in range(3):
        await ledger.register(
            [NewUnit(f"b{batch}-{i:04d}", "fleet-a", "orders") for i in range(1000)], OPERATOR
        )
    await asyncio.gather(*(ledger.claim(f"agent-{i}") for i in range(2000)))
    await raw.execute("ANALYZE")
    # Bound parameters always get a custom plan; a PREPAREd statement shows the cached one.
    await raw.execute("SET plan_cache_mode = force_generic_plan")
    await _prepare_claim(raw, statement)
    plan = await raw.fetchval(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + _execute_claim(statement, "agent-x", domain)
    )
    assert _rows_touched(plan) < 50, _rows_touched(plan)


@pytest.mark.parametrize("statement", PULL_NEXT)
@pytest.mark.parametrize("held_at_plan_time", [0, 16])
@pytest.mark.parametrize("domain", [None, "orders"])
async def test_claim_plan_cached_on_a_fresh_backlog_stays_cheap_as_it_fills(
    ledger: Ledger,
    raw: asyncpg.Connection,
    domain: str | None,
    held_at_plan_time: int,
    statement: str,
) -> None:
    """A serving connection caches its claim plan while (nearly) every unit is ready, then
    keeps it while thousands are claimed: that plan must still touch a few rows, not walk
    the listing index past every claimed unit nor look through every live claim for a
    lapsed lease."""
    # A backlog large enough for the planner to weigh the listing index against the ready
    # index (at a few thousand units it never does).
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, domain) "
        "SELECT 'b-' || g, 'fleet-a', 'orders' FROM generate_series(1, 100000) AS g"
    )
    for i in range(held_at_plan_time):
        await ledger.claim(f"early-{i}")
    # Autovacuum's ANALYZE would invalidate the cached plan mid-test and hide the trap.
    await raw.execute("ALTER TABLE work_units SET (autovacuum_enabled = off)")
    # Only the units' statistics: the trap is a tie between their indexes. (A tiny attempts
    # table gets a seq-scan plan too, which autovacuum's next ANALYZE replaces once the
    # table has grown by a tenth.)
    await raw.execute("ANALYZE work_units")
    await raw.execute("SET plan_cache_mode = force_generic_plan")
    await _prepare_claim(raw, statement)
    await raw.execute(_execute_claim(statement, "cache-the-plan", domain))
    await asyncio.gather(*(ledger.claim(f"agent-{i}") for i in range(2000)))
    plan = await raw.fetchval(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + _execute_claim(statement, "late", domain)
    )
    assert (
        await raw.fetchval("SELECT generic_plans FROM pg_prepared_statements WHERE name = 'claim'")
        == 2
    )
    assert _rows_touched(plan) < 50, _rows_touched(plan)


async def test_cached_start_plan_finds_its_unit_by_id_as_claims_pile_up(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A start planned while nearly every unit was ready and cached while thousands are
    claimed looks its unit up by id, not through every live claim."""
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet) "
        "SELECT 'b-' || g, 'fleet-a' FROM generate_series(1, 3000) AS g"
    )
    await raw.execute("ALTER TABLE work_units SET (autovacuum_enabled = off)")
    await raw.execute("ANALYZE work_units")
    claims = await asyncio.gather(*(ledger.claim(f"agent-{i}") for i in range(2000)))
    unit, attempt = claims[-1].unit, claims[-1].attempt
    assert unit is not None
    assert attempt is not None
    await raw.execute("SET plan_cache_mode = force_generic_plan")
    await raw.execute(
        "PREPARE start(uuid, work_state[], text, uuid, text) AS " + QUERIES["start_unit"]
    )
    plan = await raw.fetchval(
        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE start('{unit.id}', '{{claimed}}',"
        f" '{unit.claimed_by}', '{attempt.id}', '{unit.claimed_by}')"
    )
    assert _rows_touched(plan) < 50, _rows_touched(plan)


async def test_cached_listing_plan_starts_a_deep_page_at_its_cursor(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A page far into the unit listing reads about a page of rows, even from a cached plan."""
    for batch in range(3):
        await ledger.register(
            [NewUnit(f"b{batch}-{i:04d}", "fleet-a", "orders") for i in range(1000)], OPERATOR
        )
    await raw.execute("ANALYZE work_units")
    cursor = await raw.fetchrow(
        "SELECT created_at, id FROM work_units ORDER BY created_at, id OFFSET 2500 LIMIT 1"
    )
    await raw.execute("SET plan_cache_mode = force_generic_plan")
    await raw.execute(
        "PREPARE page(work_state, text, text, work_disposition, timestamptz, uuid, int) AS "
        + QUERIES["list_units"]
    )
    plan = await raw.fetchval(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE page(NULL, NULL, NULL, NULL, "
        f"'{cursor['created_at'].isoformat()}', '{cursor['id']}', 100)"
    )
    assert _rows_touched(plan) < 400, _rows_touched(plan)


@pytest.fixture
async def empty_database(server_url: str) -> AsyncIterator[str]:
    """A database with no schema at all."""
    name = f"wl_empty_{uuid.uuid4().hex[:12]}"
    await ensure_database(server_url, name)
    yield with_database(server_url, name)
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def test_migrations_applied_twice_change_nothing(raw: asyncpg.Connection) -> None:
    """On a migrated database, applying the migrations again applies none."""
    before = await raw.fetch("SELECT version, name, applied_at FROM wl_schema_migrations")
    assert await apply_migrations(raw) == []
    after = await raw.fetch("SELECT version, name, applied_at FROM wl_schema_migrations")
    assert after == before
    assert [r["version"] for r in after] == [m.version for m in load_migrations()]


async def test_migrations_concurrent_starters_apply_each_file_once(empty_database: str) -> None:
    """Two processes migrating a fresh database at once both succeed; each file runs once."""
    conns = await asyncio.gather(connect(empty_database), connect(empty_database))
    try:
        first, second = await asyncio.gather(*(apply_migrations(c) for c in conns))
        versions = sorted(m.version for m in [*first, *second])
        assert versions == [m.version for m in load_migrations()]
        rows = await conns[0].fetch("SELECT version FROM wl_schema_migrations ORDER BY version")
        assert [r["version"] for r in rows] == versions
        assert await apply_migrations(conns[1]) == []
    finally:
        await asyncio.gather(*(c.close() for c in conns))
