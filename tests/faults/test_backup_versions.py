"""Backup across PostgreSQL versions: a PostgreSQL 15 ledger restores into the embedded
server (18) and into another PostgreSQL 15 database.

Runs against Debian's PostgreSQL 15 (`apt-get install postgresql-15`), started here as a
server of its own; skips, saying so, where it is not installed.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from support.pgcluster import Node, build_single, remove
from support.served import cli, ledger_env
from support.worked import worked
from work_ledger.db.connect import (
    DATABASE_NAME,
    connect,
    create_pool,
    ensure_database,
    with_database,
)
from work_ledger.db.store import Store
from work_ledger.embedded.programs import program, server_major
from work_ledger.embedded.server import embedded_server_url
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger

pytestmark = pytest.mark.faults
PG15 = Path("/usr/lib/postgresql/15/bin")
# Every row that a restore must bring back, in an order that does not depend on the server.
CONTENTS = (
    "SELECT (SELECT array_agg(row(external_ref, state, disposition, cost_cents, attempt_count)"
    "  ORDER BY external_ref) FROM work_units)::text,"
    " (SELECT array_agg(row(attempt_no, agent_id, outcome, cost_cents) ORDER BY agent_id)"
    "  FROM work_unit_attempts)::text,"
    " (SELECT count(*) FROM work_unit_events), (SELECT array_agg(question) FROM blocking_questions)"
)


@pytest.fixture(scope="module")
def pg15() -> Iterator[Node]:
    """A PostgreSQL 15 server of this module's own."""
    if not (PG15 / "initdb").is_file():
        pytest.skip(f"PostgreSQL 15 is not installed ({PG15}): apt-get install postgresql-15")
    base = Path(tempfile.mkdtemp(prefix="wl-pg15-"))
    node = build_single(base, PG15)
    yield node
    node.stop()
    remove(base)


@pytest.fixture
async def ledger15(pg15: Node) -> str:
    """The URL of a ledger at work on PostgreSQL 15."""
    await ensure_database(pg15.url(), "ledger")
    url = pg15.url("ledger")
    await migrate_database(url)
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        await worked(Ledger(Store(pool), lease_seconds=60))
    finally:
        await pool.close()
    return url


async def _contents(url: str) -> asyncpg.Record:
    conn = await connect(url)
    try:
        row = await conn.fetchrow(CONTENTS)
    finally:
        await conn.close()
    assert row is not None
    return row


def _dumped_by(dump: Path) -> str:
    """The version of the pg_dump that wrote `dump`, from the archive's own header."""
    argv = [str(program("pg_restore")), "-l", str(dump)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return next(line for line in out.splitlines() if "Dumped by pg_dump version" in line)


async def test_a_postgresql_15_backup_restores_into_the_embedded_server_and_into_15(
    ledger15: str, pg15: Node, tmp_path: Path
) -> None:
    """`backup` of a PostgreSQL 15 ledger is pg_dump 15's archive; `restore` brings every row
    back into a new embedded WL_HOME (PostgreSQL 18) and into an empty PostgreSQL 15
    database, and both pass `audit`."""
    assert server_major(ledger15) == 15
    before = await _contents(ledger15)
    dump = tmp_path / "ledger15.dump"
    code, out = await cli(ledger_env(ledger15, tmp_path), "backup", str(dump))
    assert code == 0, out
    assert "version: 15." in _dumped_by(dump)

    await ensure_database(pg15.url(), "restored")
    same = pg15.url("restored")
    code, out = await cli(ledger_env(same, tmp_path), "restore", str(dump))
    assert code == 0, out
    assert before == await _contents(same)
    code, audited = await cli(ledger_env(same, tmp_path), "audit")
    assert code == 0, audited

    # Not under pytest's folders, which PostgreSQL's own user may not enter (as in conftest);
    # the folder goes after this process stops that server (exit hooks run last first).
    home = Path(tempfile.mkdtemp(prefix="wl-restored15-"))
    atexit.register(shutil.rmtree, home, True)
    embedded = ledger_env("", home)
    del embedded["WL_DATABASE_URL"]
    code, out = await cli(embedded, "restore", str(dump))
    assert code == 0, out
    code, audited = await cli(embedded, "audit")
    assert code == 0, audited
    url = with_database(embedded_server_url(home, delete_on_exit=True), DATABASE_NAME)
    assert server_major(url) == 18
    assert before == await _contents(url)
