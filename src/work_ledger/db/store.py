"""Runs named SQL statements and turns PostgreSQL refusals into ledger errors.

The database names the rule it enforced (`constraint_name`, also set by our triggers'
RAISE ... CONSTRAINT), so the mapping needs no string matching.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

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
    except (asyncpg.DataError, asyncpg.ProgramLimitExceededError) as exc:
        raise InvalidInput(f"the database refused a value: {exc}") from exc
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
    """Named statements over a pool; one statement, one round trip."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        async with translated_errors():
            return await self.pool.fetch(QUERIES[name], *args)

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        async with translated_errors():
            return await self.pool.fetchrow(QUERIES[name], *args)
