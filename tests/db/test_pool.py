"""The serving pool: one statement is one round trip, including giving the connection back,
and a connection comes back only in a state the next caller can use."""

import asyncio
import contextlib
import random
from collections.abc import Callable

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.pool import Pool


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


async def _pool_of_one(database_url: str) -> Pool:
    return await create_pool(database_url, min_size=1, max_size=1)


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_a_full_pool_serves_its_waiters_in_arrival_order(database_url: str) -> None:
    pool = await _pool_of_one(database_url)
    try:
        held = await pool.acquire()
        served: list[int] = []

        async def wait_then_run(n: int) -> int:
            async with pool.acquire() as conn:
                served.append(n)
                pid: int = await conn.fetchval("SELECT pg_backend_pid()")
                return pid

        waiters = []
        for n in range(3):
            waiters.append(asyncio.create_task(wait_then_run(n)))
            await asyncio.sleep(0)  # each queues before the next starts
        assert served == []  # none got past the held connection
        await pool.release(held)
        pids = await asyncio.gather(*waiters)
        assert served == [0, 1, 2]
        assert len(set(pids)) == 1
        assert pool.get_size() == 1
    finally:
        await pool.close()


async def test_a_cancelled_statement_takes_its_connection_with_it(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """A statement cancelled mid-flight leaves its connection busy (the server still runs
    the statement until the cancel request lands): rather than wait on it, the pool
    terminates it, and the next statement gets a fresh connection in its place."""
    pool = await _pool_of_one(database_url)
    try:
        first = await pool.fetchval("SELECT pg_backend_pid()")
        sleeping = asyncio.create_task(pool.fetchval("SELECT pg_sleep(5)"))
        query = "SELECT state FROM pg_stat_activity WHERE pid = $1"
        for _ in range(3000):
            if await raw.fetchval(query, first) == "active":
                break
            await asyncio.sleep(0.01)
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        second = await pool.fetchval("SELECT pg_backend_pid()")
        assert second != first
        assert pool.get_size() == 1
    finally:
        await pool.close()


async def test_an_error_of_the_holders_own_keeps_the_connection(database_url: str) -> None:
    """An error raised by the code holding the connection, not by the connection, gives
    it back rolled back: it is neither closed nor reopened."""
    pool = await _pool_of_one(database_url)
    try:
        first = await pool.fetchval("SELECT pg_backend_pid()")

        async def mistaken() -> None:
            async with pool.acquire() as conn:
                await conn.execute("BEGIN")
                await conn.execute("CREATE TABLE never_kept (x int)")
                raise ValueError("the holder's own mistake")

        with pytest.raises(ValueError, match="own mistake"):
            await mistaken()
        assert await pool.fetchval("SELECT pg_backend_pid()") == first
        assert await pool.fetchval("SELECT to_regclass('never_kept')::text") is None
    finally:
        await pool.close()


async def test_a_connection_killed_while_idle_is_never_handed_out(
    database_url: str, raw: asyncpg.Connection
) -> None:
    pool = await _pool_of_one(database_url)
    try:
        first = await pool.fetchval("SELECT pg_backend_pid()")
        assert await raw.fetchval("SELECT pg_terminate_backend($1)", first)
        idle = pool._idle[0]
        await _until(idle.is_closed)  # the client has seen the server close it
        second = await pool.fetchval("SELECT pg_backend_pid()")  # no error: a new one
        assert second != first
        assert pool.get_size() == 1
    finally:
        await pool.close()


async def test_a_waiter_cancelled_as_it_is_handed_a_connection_passes_it_on(
    database_url: str,
) -> None:
    pool = await _pool_of_one(database_url)
    try:
        held = await pool.acquire()
        first = asyncio.create_task(pool.fetchval("SELECT 1"))
        await asyncio.sleep(0)
        second = asyncio.create_task(pool.fetchval("SELECT 2"))
        await asyncio.sleep(0)
        await pool.release(held)  # handed to the first waiter...
        first.cancel()  # ...which is cancelled before it runs
        async with asyncio.timeout(60):  # without the hand-over it would wait for ever
            assert await second == 2
        with pytest.raises(asyncio.CancelledError):
            await first
        assert pool.get_size() == 1
        assert pool.get_idle_size() == 1
    finally:
        await pool.close()


async def test_a_closed_pool_refuses_its_waiters_and_new_callers(database_url: str) -> None:
    pool = await _pool_of_one(database_url)
    held = await pool.acquire()
    waiting = asyncio.create_task(pool.fetchval("SELECT 1"))
    await asyncio.sleep(0)
    await pool.close()
    with pytest.raises(asyncpg.InterfaceError):
        await waiting
    with pytest.raises(asyncpg.InterfaceError):
        await pool.fetchval("SELECT 1")
    await pool.release(held)  # given back after the close: closed, not kept
    assert held.is_closed()
    assert pool.get_size() == 0


async def test_under_load_no_connection_is_shared_and_the_pool_never_grows(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """40 tasks on 3 connections, repeated: plain statements, transactions, statements the
    server refuses, and tasks cancelled mid-statement or mid-wait. No connection is ever
    held by two tasks, none comes back inside a transaction, and the pool never opens more
    than its size (counted by the server too)."""
    size = 3
    pool = await create_pool(database_url, min_size=1, max_size=size)
    rng = random.Random(15)
    in_use: set[int] = set()
    most_open = 0

    async def hold(conn: asyncpg.Connection) -> None:
        nonlocal most_open
        assert id(conn) not in in_use, "one connection handed to two tasks"
        assert not conn.is_in_transaction()
        in_use.add(id(conn))
        most_open = max(most_open, pool.get_size())

    async def one_task(n: int) -> None:
        for step in range(15):
            kind = (n + step) % 4
            if kind == 0:
                conn = await pool.acquire()
                await hold(conn)
                in_use.discard(id(conn))
                await pool.release(conn)
                continue
            async with pool.acquire() as conn:
                await hold(conn)
                try:
                    if kind == 1:
                        await conn.fetchval("SELECT pg_sleep($1::float)", rng.random() / 200)
                    elif kind == 2:
                        async with conn.transaction():
                            await conn.execute("SELECT pg_sleep(0.001)")
                    else:
                        with contextlib.suppress(asyncpg.DivisionByZeroError):
                            await conn.fetchval("SELECT 1 / 0")
                finally:
                    in_use.discard(id(conn))

    try:
        for _ in range(3):
            tasks = [asyncio.create_task(one_task(n)) for n in range(40)]
            await asyncio.sleep(0.02)
            cancelled = rng.sample(tasks, 8)  # some mid-statement, some waiting
            for task in cancelled:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert all(isinstance(e, asyncio.CancelledError) for e in errors), errors
            assert pool.get_size() <= size
            assert pool.get_idle_size() == pool.get_size()  # every connection came back
            # The server's count: a backend whose client was cut off mid-sleep leaves once its
            # statement ends (a few ms), so look until it has.
            backends = (
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND application_name = 'work-ledger' AND pid <> pg_backend_pid()"
            )
            for _ in range(1000):
                if await raw.fetchval(backends) <= size:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"the server lists more than {size} pool backends")
        assert most_open <= size
        assert await pool.fetchval("SELECT 41 + 1") == 42  # and it still serves
    finally:
        await pool.close()
