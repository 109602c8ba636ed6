"""How a read of the views fails, in the ledger's errors: the views missing (an unmigrated
database) or a role that may not read them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg import Pool

from work_ledger.db.store import translated_errors
from work_ledger.errors import Forbidden, Unavailable

# Anything with fetch/fetchrow/execute: a pool or a connection.
Conn = Pool | asyncpg.Connection


@asynccontextmanager
async def reading() -> AsyncIterator[None]:
    """Ledger errors for the ways a read of the views fails."""
    try:
        async with translated_errors():
            yield
    except asyncpg.UndefinedTableError as exc:
        raise Unavailable(
            f"the read-side views are missing ({exc}); run `work-ledger migrate` on this "
            "database, then read again"
        ) from exc
    except asyncpg.InsufficientPrivilegeError as exc:
        raise Forbidden(
            f"this database role may not read the views ({exc}); connect as the ledger's "
            "owner, or as a role made by `work-ledger grant-reader`"
        ) from exc
