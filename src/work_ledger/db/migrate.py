"""Forward-only migrations: numbered plain SQL files, applied in order.

Each file runs in its own transaction, under a transaction-level advisory lock, and is
recorded in `wl_schema_migrations` in that same transaction, so concurrent starters
(several replicas, `work-ledger migrate` beside a server) apply each exactly once. No
session state is kept between transactions, so this works through a transaction pooler
too. Every lock a migration takes (the advisory lock, the tables its DDL alters) is bounded
by `lock_timeout`: a transaction left open elsewhere fails the migration with the name of
that session, instead of hanging start-up and queueing every request behind the ALTER.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from work_ledger.config import DEFAULT_MIGRATE_LOCK_TIMEOUT
from work_ledger.db.queries import QUERIES
from work_ledger.errors import Unavailable

# Any constant works; it only has to be the same in every process of this application.
MIGRATION_LOCK_KEY = 0x776C6D67  # "wlmg"
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_RECORD = (
    "CREATE TABLE IF NOT EXISTS wl_schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    folder = resources.files("work_ledger.db") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {versions}")
    return found


async def applied_versions(conn: asyncpg.Connection) -> set[int]:
    """The versions recorded as applied (none in a database without a ledger)."""
    try:
        rows = await conn.fetch("SELECT version FROM wl_schema_migrations")
    except asyncpg.UndefinedTableError:
        return set()
    return {r["version"] for r in rows}


async def apply_migrations(
    conn: asyncpg.Connection,
    *,
    lock_timeout: float = DEFAULT_MIGRATE_LOCK_TIMEOUT,
    migrations: list[Migration] | None = None,
) -> list[Migration]:
    """Apply every pending migration (of `migrations`, default the package's own); return
    those applied by this call. A ledger already up to date takes no lock."""
    done = await applied_versions(conn)
    applied = []
    for migration in migrations if migrations is not None else load_migrations():
        if migration.version not in done and await _apply(conn, migration, lock_timeout):
            applied.append(migration)
    return applied


async def _apply(conn: asyncpg.Connection, migration: Migration, lock_timeout: float) -> bool:
    """Apply `migration` unless another process just did; False if it had."""
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT set_config('lock_timeout', $1, true)", f"{round(lock_timeout * 1000)}ms"
            )
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
            await conn.execute(_RECORD)
            if migration.version in await applied_versions(conn):
                return False
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO wl_schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            return True
    except asyncpg.LockNotAvailableError:
        holders = await conn.fetch(QUERIES["migration_lock_holders"], MIGRATION_LOCK_KEY)
        raise _lock_timeout(migration, lock_timeout, holders) from None


def _lock_timeout(
    migration: Migration, seconds: float, holders: list[asyncpg.Record]
) -> Unavailable:
    """The refusal of a migration that waited `seconds` for a lock, naming who holds one."""
    who = "; ".join(
        f"pid {h['pid']} (application_name {h['application_name']!r}, client "
        f"{h['client_addr'] or 'local socket'}, {h['state']}, transaction since "
        f"{h['xact_start']}, last query at {h['query_start']}: {h['query']!r})"
        for h in holders
    )
    return Unavailable(
        f"migration {migration.version:04d}_{migration.name} waited {seconds:g}s "
        "(WL_MIGRATE_LOCK_TIMEOUT) for a lock and applied nothing; held by: "
        f"{who or 'a session that has since let go'}. End or wait for that session "
        "(pg_terminate_backend(pid) if it is stuck), then run `work-ledger migrate` again"
    )
