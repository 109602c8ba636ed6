"""schema.sql is the schema the migrations build: two fresh databases, one migrated and one
loaded from the file, have the same catalog (support/catalog.py says what is compared)."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from types import ModuleType

import asyncpg
import pytest

from support.catalog import Catalog, catalog, difference
from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.runtime import migrate_database

REGENERATE = "uv run python scripts/schema_dump.py"


def _schema_sql() -> str:
    return (resources.files("work_ledger.db") / "schema.sql").read_text(encoding="utf-8")


async def _fresh(server_url: str, prefix: str) -> str:
    """A new empty database (not a copy of the test template: a copy loses the
    database-level grants that the migrations make)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await ensure_database(server_url, name)
    return name


async def _drop(server_url: str, *names: str) -> None:
    conn = await connect(server_url)
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def built(server_url: str) -> AsyncIterator[tuple[str, str]]:
    """(URL of a database built by the migrations, URL of one built from schema.sql)."""
    migrated = await _fresh(server_url, "wl_schema_migrated")
    from_file = await _fresh(server_url, "wl_schema_file")
    migrated_url, file_url = (
        with_database(server_url, migrated),
        with_database(server_url, from_file),
    )
    await migrate_database(migrated_url)
    conn = await connect(file_url)
    try:
        await conn.execute(_schema_sql())
    except asyncpg.PostgresError as error:
        pytest.fail(
            f"src/work_ledger/db/schema.sql does not load: {error!r}; regenerate it "
            f"with `{REGENERATE}`",
            pytrace=False,
        )
    finally:
        await conn.close()
    yield migrated_url, file_url
    await _drop(server_url, migrated, from_file)


async def _catalog(url: str) -> Catalog:
    conn = await connect(url)
    try:
        return await catalog(conn)
    finally:
        await conn.close()


def _verdict(migrated: Catalog, from_file: Catalog) -> str:
    diff = difference(migrated, from_file, expected_name="migrations", actual_name="schema.sql")
    if not diff:
        return ""
    return (
        "src/work_ledger/db/schema.sql is not what the migrations build. If a migration "
        f"changed the schema, regenerate the file with `{REGENERATE}` and commit it with "
        f"the migration; never edit it by hand.\n\n{diff}"
    )


async def test_schema_file_builds_the_catalog_the_migrations_build(
    built: tuple[str, str],
) -> None:
    """The same tables, columns, constraints, indexes, triggers, functions, views, enums,
    grants and seeded rows, whichever way the database was built."""
    migrated_url, file_url = built
    migrated, from_file = await _catalog(migrated_url), await _catalog(file_url)
    assert len(migrated) > 500, "the catalog query found almost nothing: it is broken"
    verdict = _verdict(migrated, from_file)
    if verdict:
        pytest.fail(verdict, pytrace=False)  # the whole diff, not pytest's abridged repr


async def test_schema_file_check_names_a_changed_function_body_and_the_fix(
    built: tuple[str, str],
) -> None:
    """A function whose body differs by one statement is reported, with the command that
    regenerates the file (the comparison reads bodies, not only names)."""
    migrated_url, file_url = built
    conn = await connect(file_url)
    try:
        change = conn.transaction()  # rolled back: the other test reads this database too
        await change.start()
        await conn.execute(
            "CREATE OR REPLACE FUNCTION wl_next_states(from_state work_state) "
            "RETURNS work_state[] LANGUAGE sql IMMUTABLE AS $$ SELECT '{}'::work_state[] $$"
        )
        changed = await catalog(conn)
        await change.rollback()
    finally:
        await conn.close()
    verdict = _verdict(await _catalog(migrated_url), changed)
    assert "function wl_next_states(work_state): differs" in verdict, verdict
    assert REGENERATE in verdict


def _schema_dump() -> ModuleType:
    """scripts/schema_dump.py, loaded from its file (scripts/ is no package)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "schema_dump.py"
    spec = importlib.util.spec_from_file_location("schema_dump", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DUMP = """--
-- PostgreSQL database dump
--

\\restrict {key}

-- Dumped from database version 18.6
SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);

--
-- Name: budgets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budgets (
    id bigint NOT NULL
);

--
-- Name: budgets budgets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budgets
    ADD CONSTRAINT budgets_pkey PRIMARY KEY (id);

\\unrestrict {key}
"""


def test_schema_dump_renders_the_same_file_whatever_pg_dumps_random_key() -> None:
    """The rendering drops what changes from run to run (the restrict key, the dump's
    banner and settings) and the `public.` prefixes, and quotes the migration's comment."""
    render = _schema_dump().render
    why = {("table", "budgets"): ("0011_shape_and_money", ["-- A budget caps a fleet."])}
    first, second = render(DUMP.format(key="abc"), why), render(DUMP.format(key="xyz"), why)
    assert first == second
    body = first.split("===== Tables, sequences and views =====", 1)[1]
    assert body.startswith(
        "\n\n-- table: budgets\n-- (from 0011_shape_and_money:)\n-- A budget caps a fleet.\n"
        "CREATE TABLE budgets (\n"
    )
    assert "-- ===== Constraints =====\n\n-- constraint: budgets budgets_pkey\n" in body
    assert "public." not in body
    assert "restrict" not in first
    assert "SET statement_timeout" not in first
