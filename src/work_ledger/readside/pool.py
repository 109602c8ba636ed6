"""Where the read side reads: a hot standby (WL_READ_DATABASE_URL) when one is named, so
that reports and scrapes never load the primary, else the ledger's own database; and the
stall threshold the views read, written at start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg import Pool

from work_ledger.config import Settings
from work_ledger.db.connect import SERVER_SETTINGS, connect, create_pool, resolve_database_url
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.errors import InvalidInput
from work_ledger.readside.reading import Conn, reading

# A read-side connection to a standby refuses any write, should one ever be sent.
READ_ONLY = {**SERVER_SETTINGS, "default_transaction_read_only": "on"}


async def connect_reader(settings: Settings) -> asyncpg.Connection:
    """A connection for the views: to WL_READ_DATABASE_URL (a hot standby) when set, so
    reports never load the primary; otherwise to the ledger's database."""
    if settings.read_database_url is None:
        return await connect(await resolve_database_url(settings))
    async with translated_errors():
        return await connect(settings.read_database_url, server_settings=READ_ONLY)


@asynccontextmanager
async def read_pool(settings: Settings, primary: Pool) -> AsyncIterator[Pool]:
    """The pool /metrics reads its views from: a small read-only one on
    WL_READ_DATABASE_URL when set, else `primary`. Opened lazily, so a standby that is
    down at start delays no write."""
    if settings.read_database_url is None:
        yield primary
        return
    pool = await create_pool(
        settings.read_database_url, min_size=0, max_size=2, server_settings=READ_ONLY
    )
    try:
        yield pool
    finally:
        await pool.close()


async def store_settings(conn: Conn, *, stall_seconds: int) -> None:
    """Write WL_STALL_SECONDS where v_stall_list reads it (at start, by the server)."""
    if not 1 <= stall_seconds <= 604800:
        raise InvalidInput(
            f"WL_STALL_SECONDS must be 1..604800 seconds (a week), not {stall_seconds}"
        )
    async with reading():
        await conn.execute(QUERIES["read_store_settings"], stall_seconds)
