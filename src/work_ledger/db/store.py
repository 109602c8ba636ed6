"""Runs named SQL statements and turns PostgreSQL refusals into ledger errors.

The database names the rule it enforced (`constraint_name`, also set by our triggers'
RAISE ... CONSTRAINT), so the mapping needs no string matching.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from work_ledger.db.pool import Pool
from work_ledger.db.queries import QUERIES
from work_ledger.errors import InvalidInput, InvariantViolation, Unavailable

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
    try:
        yield
    except asyncpg.IntegrityConstraintViolationError as exc:
        raise _refusal(exc) from exc
    except asyncpg.RaiseError as exc:
        raise _refusal(exc) from exc
    except asyncpg.TransactionRollbackError as exc:
        raise Unavailable(
            f"the write collided with a concurrent one ({exc.sqlstate}: {exc}) and was rolled "
            "back, nothing written; retry the same request (with the same Idempotency-Key)"
        ) from exc
    except (asyncpg.DataError, asyncpg.ProgramLimitExceededError) as exc:
        raise InvalidInput(f"the database refused a value: {exc}") from exc
    except TimeoutError as exc:  # the pool's connect timeout or WL_STATEMENT_TIMEOUT
        # A statement already sent to a hung server may still run once it wakes up.
        raise Unavailable(
            "the ledger database did not answer in time (WL_STATEMENT_TIMEOUT); a write "
            "may still be applied when it recovers: retry shortly with the same "
            "Idempotency-Key, which acts once"
        ) from exc
    except _UNAVAILABLE as exc:
        raise Unavailable(
            f"the ledger database is unreachable ({type(exc).__name__}); retry shortly"
        ) from exc


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
        async with translated_errors():
            for _ in range(self.attempts - 1):
                with contextlib.suppress(asyncpg.TransactionRollbackError):
                    return await self.pool.fetch(QUERIES[name], *args)
            return await self.pool.fetch(QUERIES[name], *args)

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        async with translated_errors():
            for _ in range(self.attempts - 1):
                with contextlib.suppress(asyncpg.TransactionRollbackError):
                    return await self.pool.fetchrow(QUERIES[name], *args)
            return await self.pool.fetchrow(QUERIES[name], *args)
