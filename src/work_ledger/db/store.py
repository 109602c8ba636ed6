"""Runs named SQL statements and turns PostgreSQL refusals into ledger errors.

The database names the rule it enforced (`constraint_name`, also set by our triggers'
RAISE ... CONSTRAINT), so the mapping needs no string matching.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from work_ledger.db.queries import QUERIES
from work_ledger.errors import InvalidInput, InvariantViolation, Unavailable, WorkLedgerError

T = TypeVar("T")
# What a statement runs on: a connection, as asyncpg hands it out of its pool or not.
Connection = asyncpg.Connection | PoolConnectionProxy
# A statement on the pool is its own transaction: after a deadlock or a serialization
# failure rolled it back whole, it is run again, up to this many times in all.
TRIES_ON_POOL = 4

_UNAVAILABLE = (
    OSError,
    asyncpg.CannotConnectNowError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    # A connection cut mid-statement (e.g. PostgreSQL shutting down) is left half-way
    # through its protocol; asyncpg then refuses the next step or the pool's reset with this.
    asyncpg.InternalClientError,
)


@asynccontextmanager
async def translated_errors() -> AsyncIterator[None]:
    """Raise what `translate` makes of a database error; anything else as it is."""
    try:
        yield
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        raise error from exc


def translate(exc: Exception) -> WorkLedgerError | None:
    """The ledger error a database error stands for (None: not a database error)."""
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError | asyncpg.RaiseError):
        return _refusal(exc)
    if isinstance(exc, asyncpg.TransactionRollbackError):
        return Unavailable(
            f"the write collided with a concurrent one ({exc.sqlstate}: {exc}) and was rolled "
            "back, nothing written; retry the same request (with the same Idempotency-Key)"
        )
    if isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
        # A standby answered: HAProxy may send a connection to the member Patroni has just
        # named leader before it is promoted (measured in tests/ha/test_patroni.py).
        return Unavailable(
            "the ledger database is read-only for now (a failover is under way) and wrote "
            "nothing; retry shortly with the same Idempotency-Key"
        )
    if isinstance(exc, asyncpg.DataError | asyncpg.ProgramLimitExceededError):
        return InvalidInput(f"the database refused a value: {exc}")
    if isinstance(exc, TimeoutError):  # the pool's connect timeout or WL_STATEMENT_TIMEOUT
        # A statement already sent to a hung server may still run once it wakes up.
        return Unavailable(
            "the ledger database did not answer in time (WL_STATEMENT_TIMEOUT); a write "
            "may still be applied when it recovers: retry shortly with the same "
            "Idempotency-Key, which acts once"
        )
    if isinstance(exc, asyncpg.OutdatedSchemaCacheError):
        # Raised while decoding the answer of a statement the server has already run, once
        # a migration changed a row type this connection had cached (it reloads them now).
        return Unavailable(
            "the ledger's schema changed under this request (a migration ran); a write may "
            "have been applied: retry with the same Idempotency-Key, which acts once"
        )
    if isinstance(exc, _UNAVAILABLE):
        return Unavailable(
            f"the ledger database is unreachable ({type(exc).__name__}); retry shortly"
        )
    return None


class NeedsSavepoints(Exception):
    """A statement sent after a refusal in a transaction without savepoints: the refusal
    aborted the transaction, and its caller caught it and went on (a race the ledger
    resolves by looking again). The work must run again in a transaction whose statements
    run in savepoints."""


def commands(name: str, values: dict[str, object]) -> str:
    """The named commands `name` with `values` written in as literals.

    Several commands go in one round trip only through PostgreSQL's simple query protocol,
    which takes no parameters (asyncpg's `execute` with no arguments). So values are
    written in, and only in forms that cannot be anything but a value: bytes as hex digits
    (`decode`), text quoted as libpq's PQescapeLiteral quotes it, numbers as Python prints
    them."""
    return QUERIES[name].format_map({key: _literal(value) for key, value in values.items()})


def _literal(value: object) -> str:
    if isinstance(value, bytes):
        return f"decode('{value.hex()}', 'hex')"
    if isinstance(value, str):
        return _text_literal(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise TypeError(f"no SQL literal for {value!r}")


def _text_literal(value: str) -> str:
    """Text as a string constant, whatever standard_conforming_strings says: quotes
    doubled, and backslashes doubled in an escape string (E'...') when there are any.

    A plain constant, not text rebuilt from hex by convert_from: its result has collation
    "C", not the columns', so `key = convert_from(...)` cannot search their index, and
    the outcome's UPDATE read every stored key (1.7 ms a keyed write with 20,000 keys
    kept, bench/RESULTS.md)."""
    if "\x00" in value:
        raise ValueError("text holds a NUL character, which PostgreSQL text cannot")
    quoted = value.replace("'", "''")
    if "\\" in value:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return f"'{quoted}'"


def _refusal(exc: asyncpg.PostgresError) -> InvariantViolation:
    invariant = getattr(exc, "constraint_name", None) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    detail = str(exc) if not hint else f"{exc}; {hint}"
    return InvariantViolation(detail, invariant=invariant)


class Store:
    """Named statements, one statement one round trip: on asyncpg's pool, or on one
    connection inside a transaction (`Store.on`).

    On the pool each statement is its own transaction, rolled back whole by a deadlock or a
    serialization failure, so it is run again (a few times) before giving up. Inside a
    transaction it is not: the transaction's owner decides. There, with `savepoints`, each
    statement runs in a savepoint, so that a statement the database refuses leaves the
    transaction usable for a caller that catches the refusal and goes on; without, the
    next statement of such a caller raises `NeedsSavepoints`, and the transaction's owner
    runs the work again with savepoints. Savepoints are plain commands, so they work in a
    transaction begun by asyncpg or by `begin`.

    Callers take the pool's connections in turn, in arrival order (`turns`, a semaphore
    of the pool's size): asyncpg's pool queues its waiters in an asyncio.Queue, where a
    newcomer takes the connection a woken waiter was handed, and that waiter goes to the
    back of the queue. With 64 clients on 4 connections a few claims waited far longer
    than the others (claim p99 2x, bench/results/ab-path-20261201.md).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        conn: Connection | None = None,
        savepoints: bool = False,
        turns: asyncio.Semaphore | None = None,
    ) -> None:
        self.pool = pool
        self.conn = conn
        self.savepoints = savepoints
        self.turns = asyncio.Semaphore(pool.get_max_size()) if turns is None else turns

    def on(self, conn: Connection, *, savepoints: bool = False) -> Store:
        """These statements on `conn`, a connection of this pool in a transaction."""
        return Store(self.pool, conn=conn, savepoints=savepoints, turns=self.turns)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A connection of the pool in a transaction, committed when the block ends (rolled
        back if it raises); a database that cannot be reached is `Unavailable`."""
        async with (
            self.turns,
            translated_errors(),
            self.pool.acquire() as conn,
            conn.transaction(),
        ):
            yield conn

    async def begin(self, name: str, **values: object) -> tuple[OpenTransaction, str]:
        """A transaction held across awaits until `commit` or `end`, begun by the named
        commands `name` (`commands`), which start with BEGIN: one round trip. Returns it
        and the status of the last command (asyncpg's `execute`)."""
        # try/except, not translated_errors(), here and in `commit`: the context manager
        # cost 3 % of a keyed claim+start's instructions (callgrind, bench/RESULTS.md).
        await self.turns.acquire()
        try:
            conn = await self.pool.acquire()
            try:
                status = await conn.execute(commands(name, values))
            except BaseException:
                await _roll_back(conn)
                await self.pool.release(conn)
                raise
        except BaseException as exc:
            self.turns.release()
            error = translate(exc) if isinstance(exc, Exception) else None
            if error is None:
                raise
            raise error from exc
        return OpenTransaction(self, conn), status

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record]
        if self.conn is not None:
            rows = await self._in_transaction(self.conn.fetch, name, args)
            return rows
        # try/except, not translated_errors(): a context manager per statement cost more
        # than the rest of this method on the request path.
        async with self.turns:
            try:
                rows = await self.pool.fetch(QUERIES[name], *args)
            except Exception as exc:
                rows = await self._after_error(exc, self.pool.fetch, name, args)
        return rows

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None
        if self.conn is not None:
            row = await self._in_transaction(self.conn.fetchrow, name, args)
            return row
        async with self.turns:
            try:
                row = await self.pool.fetchrow(QUERIES[name], *args)
            except Exception as exc:
                row = await self._after_error(exc, self.pool.fetchrow, name, args)
        return row

    async def _in_transaction(
        self, method: Callable[..., Awaitable[T]], name: str, args: tuple[Any, ...]
    ) -> T:
        assert self.conn is not None
        try:
            if not self.savepoints:
                try:
                    return await method(QUERIES[name], *args)
                except asyncpg.InFailedSQLTransactionError as exc:
                    raise NeedsSavepoints(f"{name} after a refusal caught") from exc
            await self.conn.execute("SAVEPOINT wl_statement")
            try:
                result = await method(QUERIES[name], *args)
            except asyncpg.PostgresError:
                await self.conn.execute(
                    "ROLLBACK TO SAVEPOINT wl_statement; RELEASE SAVEPOINT wl_statement"
                )
                raise
            await self.conn.execute("RELEASE SAVEPOINT wl_statement")
            return result
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    async def _after_error(
        self,
        exc: Exception,
        method: Callable[..., Awaitable[T]],
        name: str,
        args: tuple[Any, ...],
    ) -> T:
        """Run the statement again after a rollback of the whole of it (a deadlock or a
        serialization failure), a few times; otherwise raise the ledger's error for `exc`."""
        tries = TRIES_ON_POOL - 1
        while tries > 0 and isinstance(exc, asyncpg.TransactionRollbackError):
            tries -= 1
            try:
                return await method(QUERIES[name], *args)
            except Exception as again:
                exc = again
        error = translate(exc)
        if error is None:
            raise exc
        raise error from exc


class OpenTransaction:
    """A transaction on a connection of the pool, begun and ended by plain commands
    (`Store.begin`) and left open across awaits by its owner; it holds its turn
    (`Store.turns`) until `end`."""

    def __init__(self, store: Store, conn: PoolConnectionProxy) -> None:
        self.pool, self.conn = store.pool, conn
        self._turns = store.turns
        self._ended = False

    def store(self, *, savepoints: bool = False) -> Store:
        return Store(self.pool, conn=self.conn, savepoints=savepoints, turns=self._turns)

    async def commit(self, name: str, **values: object) -> None:
        """Run the named commands `name` (`commands`), which end with COMMIT: one round
        trip. If one fails, those after it do not run and `end` rolls back."""
        try:
            await self.conn.execute(commands(name, values))
        except asyncpg.InFailedSQLTransactionError as exc:
            # A refusal was caught and the work went on without another statement.
            raise NeedsSavepoints(f"{name} after a refusal caught") from exc
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    async def end(self) -> None:
        """Roll back (nothing to do after a commit) and give the connection back. A dead
        connection has rolled back already: the pool drops it."""
        if self._ended:
            return
        self._ended = True
        try:
            await _roll_back(self.conn)
            with contextlib.suppress(Exception):
                await self.pool.release(self.conn)
        finally:
            self._turns.release()


async def _roll_back(conn: Connection) -> None:
    # A connection given back in a transaction would be rolled back by the pool's reset,
    # which reports it as an error. A broken one (asyncpg then refuses any call on it,
    # this one too) has rolled back already and is dropped by the pool.
    with contextlib.suppress(Exception):
        if conn.is_in_transaction():
            await conn.execute("ROLLBACK")
