"""Opening the ledger: find the database, migrate it, and pool connections to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from work_ledger.config import DEFAULT_MIGRATE_LOCK_TIMEOUT, Settings
from work_ledger.db.connect import connect, create_pool, resolve_database_url
from work_ledger.db.migrate import applied_versions, apply_migrations, load_migrations
from work_ledger.db.session import require_session
from work_ledger.db.store import Store
from work_ledger.errors import Unavailable
from work_ledger.readside.pool import store_settings
from work_ledger.service.ledger import Ledger


async def migrate_database(
    url: str, *, lock_timeout: float = DEFAULT_MIGRATE_LOCK_TIMEOUT
) -> list[str]:
    conn = await connect(url, pooled=True)  # it may be a pooler's URL: no session state
    try:
        applied = await apply_migrations(conn, lock_timeout=lock_timeout)
        return [f"{m.version:04d}_{m.name}" for m in applied]
    finally:
        await conn.close()


async def session_url(settings: Settings, url: str) -> str:
    """The URL to LISTEN and migrate on: WL_DIRECT_DATABASE_URL, else `url`; an external
    one proven to hear its own NOTIFY (not a transaction pooler's)."""
    direct = settings.direct_database_url or url
    if settings.database_url is not None:  # the embedded server is reached directly
        variable = "WL_DIRECT_DATABASE_URL" if settings.direct_database_url else "WL_DATABASE_URL"
        await require_session(direct, variable=variable)
    return direct


async def migrate_ledger(settings: Settings, url: str) -> list[str]:
    """`work-ledger migrate`, and every start without --no-migrate."""
    direct = await session_url(settings, url)
    return await migrate_database(direct, lock_timeout=settings.migrate_lock_timeout)


async def require_migrated(url: str) -> None:
    """Refuse to serve (--no-migrate) a ledger that lacks a migration this release needs."""
    conn = await connect(url, pooled=True)
    try:
        done = await applied_versions(conn)
    finally:
        await conn.close()
    missing = [f"{m.version:04d}_{m.name}" for m in load_migrations() if m.version not in done]
    if missing:
        raise Unavailable(
            f"the ledger database lacks migration(s) {', '.join(missing)} that this release "
            "needs; run `work-ledger migrate` (once, from any host), then start it again"
        )


@asynccontextmanager
async def open_ledger(
    settings: Settings,
    *,
    max_connections: int = 10,
    url: str | None = None,
    unbounded: bool = False,
    migrate: bool = True,
) -> AsyncIterator[Ledger]:
    """A migrated, pooled ledger for the life of the block, each statement bounded by
    `settings.statement_timeout`. Operator commands that scan the whole ledger (audit)
    pass `unbounded=True`; `migrate=False` (serve --no-migrate) refuses a ledger that
    lacks a migration instead of applying it."""
    url = url or await resolve_database_url(settings)
    if migrate:
        await migrate_ledger(settings, url)
    else:
        await require_migrated(await session_url(settings, url))
    pool = await create_pool(
        url,
        min_size=min(2, max_connections),
        max_size=max_connections,
        statement_timeout=None if unbounded else settings.statement_timeout,
        pooled=settings.direct_database_url is not None,
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
