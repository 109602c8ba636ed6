"""Runs named SQL statements and turns PostgreSQL refusals into ledger errors.

The database names the rule it enforced (`constraint_name`, also set by our triggers'
RAISE ... CONSTRAINT), so the mapping needs no string matching.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg

from work_ledger.db.pool import Pool
from work_ledger.db.queries import QUERIES
from work_ledger.errors import InvalidInput, InvariantViolation, Unavailable, WorkLedgerError

T = TypeVar("T")

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
    if isinstance(exc, _UNAVAILABLE):
        return Unavailable(
            f"the ledger database is unreachable ({type(exc).__name__}); retry shortly"
        )
    return None


def _refusal(exc: asyncpg.PostgresError) -> InvariantViolation:
    invariant = getattr(exc, "constraint_name", None) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    detail = str(exc) if not hint else f"{exc}; {hint}"
    return InvariantViolation(detail, invariant=invariant)


class Store:
    """Named statements over a pool; one statement, one round trip.

    On a real pool each statement is its own transaction, rolled back whole by a deadlock
    or a serialization failure, so it is run again (a few times) before giving up. Inside a
    caller's transaction (anything else standing in for the pool) it is not: the caller's
    transaction decides.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.attempts = 4 if isinstance(pool, Pool) else 1

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        # try/except, not translated_errors(): a context manager per statement cost more
        # than the rest of this method on the request path.
        try:
            rows: list[asyncpg.Record] = await self.pool.fetch(QUERIES[name], *args)
        except Exception as exc:
            rows = await self._after_error(exc, self.pool.fetch, name, args)
        return rows

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        try:
            row: asyncpg.Record | None = await self.pool.fetchrow(QUERIES[name], *args)
        except Exception as exc:
            row = await self._after_error(exc, self.pool.fetchrow, name, args)
        return row

    async def _after_error(
        self,
        exc: Exception,
        method: Callable[..., Awaitable[T]],
        name: str,
        args: tuple[Any, ...],
    ) -> T:
        """Run the statement again after a rollback of the whole of it (a deadlock or a
        serialization failure), a few times; otherwise raise the ledger's error for `exc`."""
        tries = self.attempts - 1
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
