"""The serving pool: one statement is one round trip, including giving the connection back."""

import asyncpg

from work_ledger.db.connect import create_pool


async def test_returning_a_connection_sends_nothing(
    database_url: str, raw: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        pid = await pool.fetchval("SELECT pg_backend_pid()")
        # pg_stat_activity shows each backend's last statement: asyncpg's default reset
        # (`SELECT pg_advisory_unlock_all(); ... RESET ALL`) would have followed ours.
        last = await raw.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        assert last == "SELECT pg_backend_pid()"
    finally:
        await pool.close()


async def test_a_transaction_left_open_is_still_rolled_back(
    database_url: str, raw: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        conn = await pool.acquire()
        await conn.execute("BEGIN")
        await conn.execute("CREATE TABLE left_open (x int)")
        await pool.release(conn)
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
        assert await raw.fetchval("SELECT to_regclass('left_open')") is None
    finally:
        await pool.close()
