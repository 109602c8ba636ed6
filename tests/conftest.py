"""Shared fixtures: a real PostgreSQL for the whole session, a fresh database per test.

The server is WL_TEST_DATABASE_URL (any PostgreSQL 15+; the URL of a database whose user
may CREATE DATABASE, on a server that checks the passwords of other roles, as the reader
tests expect) or, by default, an embedded server in a temporary directory
(scripts/pg-matrix makes such an external server from a PostgreSQL bin directory). One
migrated template database is built per session; each test gets its own copy of it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from asyncpg import Pool

from work_ledger.cli import console
from work_ledger.db.connect import connect, create_pool, ensure_database, with_database
from work_ledger.db.store import Store
from work_ledger.embedded.server import embedded_server_url
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger


@pytest.fixture(scope="session")
def server_url() -> str:
    """An admin URL of the PostgreSQL server the tests run against."""
    external = os.environ.get("WL_TEST_DATABASE_URL")
    if external:
        return external
    # Not under pytest's temporary folders: another pytest run on the machine may prune
    # those while this server still runs in them.
    home = Path(tempfile.mkdtemp(prefix="wl-tests-"))
    return embedded_server_url(home, delete_on_exit=True)


@pytest.fixture(scope="session")
async def template_name(server_url: str) -> str:
    name = f"wl_template_{os.getpid()}"
    await ensure_database(server_url, name)
    await migrate_database(with_database(server_url, name))
    return name


async def _drop(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
async def database_url(server_url: str, template_name: str) -> AsyncIterator[str]:
    """A migrated database of this test's own, dropped afterwards."""
    name = f"wl_test_{uuid.uuid4().hex[:12]}"
    await ensure_database(server_url, name, template=template_name)
    yield with_database(server_url, name)
    await _drop(server_url, name)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=8)
    yield pool
    await pool.close()


@pytest.fixture
async def ledger(pool: Pool) -> Ledger:
    return Ledger(Store(pool), lease_seconds=60)


@pytest.fixture
async def raw(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, for raw SQL that tries to break the invariants."""
    conn = await connect(database_url)
    yield conn
    await conn.close()


@pytest.fixture(autouse=True)
def _consoles_made_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's rich consoles are made on first use and keep the width they were made
    with (COLUMNS, which an xdist worker sets to 80): each test's CLI output is drawn at
    the width its own environment asks for."""
    for lazy in (console.console, console.err_console):
        monkeypatch.setattr(lazy, "_console", None)


_OWN_TEMPROOT = "wl-pytest-"


def pytest_configure(config: pytest.Config) -> None:
    """This run's temporary folders (tmp_path) under a root of its own.

    Under the shared /tmp/pytest-of-<user>, every other pytest run on the machine resets
    that folder to 0700 when it starts, and an embedded PostgreSQL of a test (which runs as
    its own user) can no longer reach its data directory: initdb fails, "Permission denied".
    """
    if config.option.basetemp is None and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = tempfile.mkdtemp(prefix=_OWN_TEMPROOT)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the root is shared with the other workers until the run ends
    root = os.environ.get("PYTEST_DEBUG_TEMPROOT", "")
    if Path(root).name.startswith(_OWN_TEMPROOT):
        shutil.rmtree(root, ignore_errors=True)
