"""Migrations under other sessions' locks: bounded waits that name the holder; --no-migrate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from work_ledger.db.connect import SERVER_SETTINGS, connect
from work_ledger.db.migrate import MIGRATION_LOCK_KEY, Migration, apply_migrations, load_migrations
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, NewUnit, Unit
from work_ledger.errors import Unavailable
from work_ledger.runtime import require_migrated
from work_ledger.service.ledger import Ledger

NEXT = Migration(9999, "add_review_note", "ALTER TABLE work_units ADD COLUMN review_note text")


@pytest.fixture
async def stuck(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A session named `stuck-report`, left inside an open transaction."""
    conn = await connect(
        database_url, server_settings={**SERVER_SETTINGS, "application_name": "stuck-report"}
    )
    await conn.execute("BEGIN")
    yield conn
    await conn.close()


async def _has_review_note(raw: asyncpg.Connection) -> bool:
    found = await raw.fetchval(
        "SELECT count(*) FROM pg_attribute WHERE attrelid = 'work_units'::regclass"
        " AND attname = 'review_note'"
    )
    return bool(found)


@pytest.mark.parametrize("holds", ["a table read", "the migration lock"])
async def test_a_migration_behind_an_open_transaction_fails_naming_that_session(
    raw: asyncpg.Connection, stuck: asyncpg.Connection, holds: str
) -> None:
    """A transaction left open (on a table the migration alters, or holding the migration
    lock) fails the migration after lock_timeout, naming its pid and application_name;
    nothing is applied, and once it ends the migration goes through."""
    if holds == "a table read":
        await stuck.execute("SELECT count(*) FROM work_units")
    else:
        await stuck.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
    pid = await stuck.fetchval("SELECT pg_backend_pid()")
    every = [*load_migrations(), NEXT]
    with pytest.raises(Unavailable) as refused:
        await asyncio.wait_for(apply_migrations(raw, lock_timeout=0.5, migrations=every), 60)
    said = refused.value.detail
    assert "migration 9999_add_review_note waited 0.5s (WL_MIGRATE_LOCK_TIMEOUT)" in said
    assert f"pid {pid} (application_name 'stuck-report'" in said
    assert not await _has_review_note(raw)
    await stuck.execute("ROLLBACK")
    assert [m.version for m in await apply_migrations(raw, migrations=every)] == [9999]
    assert await _has_review_note(raw)


async def test_an_up_to_date_ledger_starts_without_waiting_for_the_migration_lock(
    raw: asyncpg.Connection, stuck: asyncpg.Connection
) -> None:
    """A replica of a migrated ledger takes no lock: another session holding the migration
    lock does not hold up its start."""
    await stuck.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
    assert await asyncio.wait_for(apply_migrations(raw, lock_timeout=60), 30) == []


async def test_no_migrate_refuses_a_ledger_that_lacks_a_migration(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """`serve --no-migrate` on a ledger without this release's last migration refuses,
    naming it and `work-ledger migrate`; on an up-to-date one it says nothing."""
    await require_migrated(database_url)
    last = load_migrations()[-1]
    await raw.execute("DELETE FROM wl_schema_migrations WHERE version = $1", last.version)
    with pytest.raises(Unavailable) as refused:
        await require_migrated(database_url)
    assert f"lacks migration(s) {last.version:04d}_{last.name}" in refused.value.detail
    assert "run `work-ledger migrate`" in refused.value.detail


async def test_a_row_type_changed_by_a_migration_is_a_503_that_says_a_write_may_be_applied(
    ledger: Ledger, pool: asyncpg.Pool, raw: asyncpg.Connection
) -> None:
    """A connection that cached `work_units`' row type before a migration added a column
    answers its next such statement with a 503 saying the write may have been applied and
    to retry with the same Idempotency-Key; the statement after that reads the new type."""
    await ledger.register([NewUnit("typed", "f", "d")], Actor("op", privileged=True))
    store = Store(pool)
    rows = await asyncio.gather(*(store.fetchrow("find_unit", "typed") for _ in range(8)))
    assert all(row is not None for row in rows)
    await raw.execute(NEXT.sql)
    seen: list[str] = []
    for _ in range(16):
        try:
            await store.fetchrow("find_unit", "typed")
        except Unavailable as exc:
            seen.append(exc.detail)
    assert seen, "no connection had cached the old row type"
    assert all("a write may have been applied" in s and "Idempotency-Key" in s for s in seen)
    row = await store.fetchrow("find_unit", "typed")
    assert row is not None
    assert Unit.from_record(row["unit"]).external_ref == "typed"
