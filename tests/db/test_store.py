"""Store: a statement rolled back whole by a deadlock runs again; other refusals do not; a
read-only server (a standby before its promotion) is a 503, never a 500."""

import asyncio

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store
from work_ledger.errors import Unavailable

# Locks row $1, waits, then locks row $2: two of these in opposite orders deadlock.
LOCK_IN_ORDER = """
CREATE TABLE lock_pair (id int PRIMARY KEY);
INSERT INTO lock_pair VALUES (1), (2);
CREATE FUNCTION lock_in_order(first int, second int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM lock_pair WHERE id = first FOR UPDATE;
    PERFORM pg_sleep(0.3);
    PERFORM 1 FROM lock_pair WHERE id = second FOR UPDATE;
    RETURN first;
END $$;
"""


async def _deadlocks(raw: asyncpg.Connection) -> int:
    await raw.execute("SELECT pg_stat_clear_snapshot()")
    count: int = await raw.fetchval(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    )
    return count


async def test_a_deadlocked_statement_runs_again(
    database_url: str, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    await raw.execute(LOCK_IN_ORDER)
    monkeypatch.setitem(QUERIES, "lock_in_order", "SELECT lock_in_order($1, $2) AS first")
    pool = await create_pool(database_url, min_size=2, max_size=2)
    before = await _deadlocks(raw)
    try:
        store = Store(pool)
        rows = await asyncio.gather(
            store.fetchrow("lock_in_order", 1, 2), store.fetchrow("lock_in_order", 2, 1)
        )
    finally:
        await pool.close()
    assert [row["first"] for row in rows if row is not None] == [1, 2]
    # The statistics reach pg_stat_database within a second or so. At least one deadlock:
    # under load the two can meet more than once before both get through.
    for _ in range(100):
        if await _deadlocks(raw) > before:
            break
        await asyncio.sleep(0.1)
    assert await _deadlocks(raw) > before


async def test_a_statement_that_keeps_deadlocking_is_unavailable(
    database_url: str, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four runs in all, then an error that says to retry (a 503): never a 500."""
    await raw.execute(
        "CREATE SEQUENCE runs;"
        " CREATE FUNCTION deadlocked(run bigint) RETURNS int LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'run %', run USING ERRCODE = 'deadlock_detected'; END $$"
    )
    # A sequence is not rolled back: it counts the runs.
    monkeypatch.setitem(QUERIES, "deadlocked", "SELECT deadlocked(nextval('runs'))")
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        with pytest.raises(Unavailable, match="collided with a concurrent one"):
            await Store(pool).fetchrow("deadlocked")
    finally:
        await pool.close()
    assert await raw.fetchval("SELECT last_value FROM runs") == 4


async def test_a_write_to_a_read_only_server_is_unavailable(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that reaches a standby (here: a read-only session) says retry (a 503)."""
    # As the idempotency reservation that met a standby did: a row lock is a write.
    monkeypatch.setitem(QUERIES, "lock_a_unit", "SELECT id FROM work_units LIMIT 1 FOR UPDATE")
    pool = await create_pool(
        database_url,
        min_size=1,
        max_size=1,
        server_settings={"application_name": "read-only", "default_transaction_read_only": "on"},
    )
    try:
        with pytest.raises(Unavailable, match="read-only for now"):
            await Store(pool).fetchrow("lock_a_unit")
    finally:
        await pool.close()
