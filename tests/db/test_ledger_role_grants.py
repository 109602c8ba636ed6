"""deploy/kubernetes/grant-ledger-role.sql: a ledger role that is no superuser (a managed or
operator-run PostgreSQL's database owner) migrates once a superuser ran that file."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from work_ledger.db.connect import connect, with_database
from work_ledger.db.migrate import applied_versions, load_migrations
from work_ledger.runtime import migrate_database

GRANTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "grant-ledger-role.sql"


def _as(url: str, role: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{parts.netloc.rpartition('@')[2]}"))


async def test_a_database_owner_without_superuser_migrates_after_the_grants(
    server_url: str,
) -> None:
    """Without the file migration 0008 is refused (lo_import is nobody's to pass on); after
    it, every migration applies as the owner."""
    suffix = uuid.uuid4().hex[:10]
    role, database = f"wl_owner_{suffix}", f"wl_owned_{suffix}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'owner-secret'")
        await admin.execute(f'CREATE DATABASE "{database}" OWNER "{role}"')
        owner_url = _as(with_database(server_url, database), role, "owner-secret")

        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await migrate_database(owner_url)

        superuser = await connect(with_database(server_url, database))
        try:
            await superuser.execute(GRANTS.read_text().replace("TO work_ledger", f'TO "{role}"'))
        finally:
            await superuser.close()
        await migrate_database(owner_url)

        owner = await connect(owner_url)
        try:
            done = await applied_versions(owner)
            assert not await owner.fetchval(
                "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role
            )
        finally:
            await owner.close()
        assert done >= {m.version for m in load_migrations()}
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()
