"""Where the database is, and connections to it."""

from __future__ import annotations

import contextlib
import json
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from work_ledger.config import DEFAULT_STATEMENT_TIMEOUT, Settings
from work_ledger.embedded.server import DATABASE_NAME, embedded_server_url

# Every connection talks UTC and names itself in pg_stat_activity. (Startup parameters, not
# session SETs: PgBouncer tracks these two and sets them on whichever server it lends.)
SERVER_SETTINGS = {"timezone": "UTC", "application_name": "work-ledger"}
# asyncpg's default. Through a transaction pooler (PgBouncer) the next transaction may run
# on another server, which lacks this one's named prepared statements: a `pooled`
# connection keeps none (each statement is prepared unnamed, within its own round trips).
STATEMENT_CACHE_SIZE = 100


def _cache_size(pooled: bool) -> int:
    return 0 if pooled else STATEMENT_CACHE_SIZE


def with_database(url: str, database: str) -> str:
    """The same server URL, pointing at another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def ensure_database(admin_url: str, database: str, template: str | None = None) -> None:
    """Create `database` on the server unless it exists (no-op when it does)."""
    conn = await asyncpg.connect(admin_url, server_settings=SERVER_SETTINGS)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if not exists:
            quoted = '"' + database.replace('"', '""') + '"'
            clause = "" if template is None else ' TEMPLATE "' + template.replace('"', '""') + '"'
            # Another process may create it between our look and our create (its commit not
            # yet visible, e.g. while it waits for a synchronous standby: then the catalog's
            # unique index refuses ours).
            with contextlib.suppress(asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
                await conn.execute(f"CREATE DATABASE {quoted}{clause}")
    finally:
        await conn.close()


async def resolve_database_url(settings: Settings) -> str:
    """WL_DATABASE_URL if set; otherwise the embedded server's ledger database."""
    if settings.database_url:
        return settings.database_url
    admin_url = embedded_server_url(settings.home, wal_mirror=settings.wal_mirror)
    await ensure_database(admin_url, DATABASE_NAME)
    return with_database(admin_url, DATABASE_NAME)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def connect(
    url: str, *, server_settings: dict[str, str] = SERVER_SETTINGS, pooled: bool = False
) -> asyncpg.Connection:
    conn = await asyncpg.connect(
        url, server_settings=server_settings, statement_cache_size=_cache_size(pooled)
    )
    await _init_connection(conn)
    return conn


# A hung server or network must turn into an error the caller can act on (503), not a
# connection attempt that never ends.
CONNECT_TIMEOUT_SECONDS = 10.0


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset: nothing beyond asyncpg's own rollback of a transaction left open.
    The default (`SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`) is a
    second round trip per statement, and pooled connections take no session state (no SET,
    LISTEN, advisory lock or cursor: the listener and the migrator connect on their own)."""


async def create_pool(
    url: str,
    *,
    min_size: int = 2,
    max_size: int = 10,
    statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
    server_settings: dict[str, str] = SERVER_SETTINGS,
    pooled: bool = False,
) -> asyncpg.Pool:
    """asyncpg's pool of connections set up as `connect` sets one up; `min_size` opened now.
    Each statement is bounded by `statement_timeout` seconds (asyncpg's command_timeout,
    which also cancels it on the server)."""
    pool: asyncpg.Pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        statement_cache_size=_cache_size(pooled),
        reset=_keep_session,
        server_settings=server_settings,
        timeout=CONNECT_TIMEOUT_SECONDS,
        command_timeout=statement_timeout,
        # Connections stay open until they fail or the pool closes: no idle timer re-armed
        # on every release.
        max_inactive_connection_lifetime=0,
    )
    return pool
