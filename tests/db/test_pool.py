"""The serving pool (asyncpg's, set up by `create_pool`): giving a connection back sends
nothing, leaves no transaction open, and connections the server dropped are replaced."""

import asyncio

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.errors import InvalidInput


async def test_returning_a_connection_sends_nothing(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """No reset statement follows ours (asyncpg's default reset is a second round trip)."""
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
    """A connection given back inside a transaction comes out again outside it."""
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


async def test_connections_the_server_dropped_are_replaced(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """Every pooled backend terminated (as a server restart does): the next statements run
    on new connections."""
    pool = await create_pool(database_url, min_size=3, max_size=3)
    try:
        store = Store(pool)
        before = {await pool.fetchval("SELECT pg_backend_pid()") for _ in range(3)}
        await raw.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'work-ledger' AND pid <> pg_backend_pid() "
            "AND datname = current_database()"
        )
        for _ in range(100):  # until asyncpg has seen each socket close
            await asyncio.sleep(0.05)
            try:
                after = await pool.fetchval("SELECT pg_backend_pid()")
            except (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError):
                continue
            if after not in before:
                break
        assert await store.fetchrow("count_live_tokens") is not None
        assert await pool.fetchval("SELECT pg_backend_pid()") not in before
    finally:
        await pool.close()


async def test_a_refused_statement_in_a_transaction_leaves_it_usable(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """With savepoints, a statement the database refuses is undone alone: the transaction
    goes on and commits what it did before."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        store = Store(pool)
        async with store.transaction() as conn:
            inside = store.on(conn, savepoints=True)
            # max_attempts, no requirement edges, no exclusion keys
            no_requirements = ([5], [], [], [], [None])
            await inside.fetch(
                "register_units", ["p1"], ["f"], ["d"], [None], "op", *no_requirements
            )
            with pytest.raises(InvalidInput):  # PostgreSQL's text cannot hold a NUL
                await inside.fetch(
                    "register_units", ["p\x002"], ["f"], ["d"], [None], "op", *no_requirements
                )
        assert await raw.fetchval("SELECT count(*) FROM work_units WHERE external_ref = 'p1'")
    finally:
        await pool.close()
