"""Forward-only migrations: numbered plain SQL files, applied in order under an advisory lock.

Each file runs in its own transaction and is recorded in `wl_schema_migrations`, so
concurrent starters (several replicas, or a CLI beside the server) apply each exactly once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

# Any constant works; it only has to be the same in every process of this application.
MIGRATION_LOCK_KEY = 0x776C6D67  # "wlmg"
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


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


async def apply_migrations(
    conn: asyncpg.Connection, *, through: int | None = None
) -> list[Migration]:
    """Apply every pending migration (numbered up to `through`, when given: a benchmark
    measures a schema before a change); return those applied by this call."""
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS wl_schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM wl_schema_migrations")}
        applied = []
        for migration in load_migrations():
            if migration.version in done or (through is not None and migration.version > through):
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO wl_schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            applied.append(migration)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
