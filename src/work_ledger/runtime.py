"""Opening the ledger: find the database, migrate it, and pool connections to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from work_ledger.config import Settings
from work_ledger.db.connect import connect, create_pool, resolve_database_url
from work_ledger.db.migrate import apply_migrations
from work_ledger.db.store import Store
from work_ledger.readside.pool import store_settings
from work_ledger.service.ledger import Ledger


async def migrate_database(url: str) -> list[str]:
    conn = await connect(url)
    try:
        return [f"{m.version:04d}_{m.name}" for m in await apply_migrations(conn)]
    finally:
        await conn.close()


@asynccontextmanager
async def open_ledger(
    settings: Settings,
    *,
    max_connections: int = 10,
    url: str | None = None,
    unbounded: bool = False,
) -> AsyncIterator[Ledger]:
    """A migrated, pooled ledger for the life of the block, each statement bounded by
    `settings.statement_timeout`. Operator commands that scan the whole ledger (audit)
    pass `unbounded=True`."""
    url = url or await resolve_database_url(settings)
    await migrate_database(url)
    pool = await create_pool(
        url,
        min_size=min(2, max_connections),
        max_size=max_connections,
        statement_timeout=None if unbounded else settings.statement_timeout,
    )
    try:
        if settings.stall_seconds is not None:
            # v_stall_list reads it. Only a process told a threshold writes one, so a CLI
            # started without WL_STALL_SECONDS leaves the server's in place.
            await store_settings(pool, stall_seconds=settings.stall_seconds)
        yield Ledger(
            Store(pool),
            lease_seconds=settings.lease_seconds,
            evidence_prefixes=settings.evidence_allowed_prefixes,
            max_attempts=settings.max_attempts,
        )
    finally:
        await pool.close()
