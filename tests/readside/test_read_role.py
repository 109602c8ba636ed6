"""`grant-reader`: a LOGIN role that may SELECT the five views and nothing else.

The embedded server asks every role for its password (SCRAM); what is tested besides is
the role's privileges, which hold whatever the authentication.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

import asyncpg
import pytest

from work_ledger.domain.flow import ControlChange
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.errors import InvalidInput
from work_ledger.readside.roles import (
    READ_VIEWS,
    check_reader_role,
    grant_reader,
    scram_sha256_verifier,
)
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)

# A view that is not updatable is refused before its privileges are even checked.
REFUSED = (asyncpg.InsufficientPrivilegeError, asyncpg.ObjectNotInPrerequisiteStateError)
WRITES = (
    "INSERT INTO {t} DEFAULT VALUES",
    "UPDATE {t} SET {c} = {c} WHERE false",
    "DELETE FROM {t} WHERE false",
    "TRUNCATE {t}",
)


async def _tables(raw: asyncpg.Connection) -> list[str]:
    """Every table and sequence of the ledger's schema, today's and any added later."""
    rows = await raw.fetch(
        "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        " AND relkind IN ('r', 'p', 'S') ORDER BY relname"
    )
    return [r["relname"] for r in rows]


async def _read_write(reader: asyncpg.Connection) -> None:
    """Lift the role's read-only default, so that only privileges stand in the way."""
    await reader.execute("SET default_transaction_read_only = off")


async def test_reader_reads_each_view_as_the_owner_does(
    seeded: Ledger, raw: asyncpg.Connection, reader: asyncpg.Connection
) -> None:
    """Every view returns the same rows to the reader as to the ledger's owner."""
    # DESIGN §12's views need a budget and a waiting unit, which the shared seed lacks.
    await seeded.set_budget("fleet-a", 1000, OPERATOR)
    # DESIGN §13's need a controlled scope holding a ready unit back.
    await seeded.set_controls(ControlChange("fleet-a", "seed", paused=True), OPERATOR)
    # The ranks views hold what was folded, v_changed_units what was written since.
    await raw.execute("SELECT wl_fold_read_summaries()")
    await seeded.register(
        [NewUnit("z-lib", "fleet-z"), NewUnit("z-svc", "fleet-z", requires=("z-lib",))], OPERATOR
    )
    for view in READ_VIEWS:
        query = f"SELECT * FROM {view}"
        expected = sorted((tuple(r) for r in await raw.fetch(query)), key=repr)
        assert expected
        assert sorted((tuple(r) for r in await reader.fetch(query)), key=repr) == expected


async def test_reader_is_refused_every_table(
    seeded: Ledger, raw: asyncpg.Connection, reader: asyncpg.Connection
) -> None:
    """SELECT on each table and sequence is refused, settings and migrations included."""
    tables = await _tables(raw)
    assert {"work_units", "work_unit_events", "wl_settings", "wl_schema_migrations"} <= set(tables)
    for table in tables:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await reader.fetch(f"SELECT * FROM {table} LIMIT 1")


async def test_reader_is_refused_every_write(
    seeded: Ledger, raw: asyncpg.Connection, reader: asyncpg.Connection
) -> None:
    """INSERT, UPDATE, DELETE, TRUNCATE on every table fail on privileges, not read-only."""
    await _read_write(reader)
    for table in await _tables(raw):
        if await raw.fetchval("SELECT relkind = 'S' FROM pg_class WHERE oid = $1::regclass", table):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await reader.fetchval("SELECT nextval($1::regclass)", table)
            continue
        column = await raw.fetchval(
            "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0"
            " AND attidentity = '' AND attgenerated = '' ORDER BY attnum LIMIT 1",
            table,
        )
        for write in WRITES:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await reader.execute(write.format(t=table, c=column))


async def test_reader_cannot_change_views_or_schema(
    seeded: Ledger, reader: asyncpg.Connection
) -> None:
    """No write through a view, no new object in the schema, no granting itself more."""
    await _read_write(reader)
    refused = [
        "DELETE FROM v_stall_list",
        "CREATE TABLE public.leak (x int)",
        "CREATE VIEW public.leak AS SELECT 1",
        "CREATE FUNCTION public.leak() RETURNS int LANGUAGE sql RETURN 1",
        "DROP VIEW v_rework",
        "ALTER VIEW v_rework SET (security_barrier = false)",
        "SELECT wl_grant_reader('someone_else', 'x')",
        "GRANT SELECT ON work_units TO PUBLIC",
    ]
    for statement in refused:
        with pytest.raises(REFUSED):
            await reader.execute(statement)


async def test_reader_role_is_read_only_by_default(reader: asyncpg.Connection) -> None:
    """Its sessions start read-only with a statement timeout."""
    assert await reader.fetchval("SHOW default_transaction_read_only") == "on"
    assert await reader.fetchval("SHOW statement_timeout") == "30s"


async def test_grant_reader_stores_a_scram_verifier_and_no_powers(
    raw: asyncpg.Connection, reader_url: str
) -> None:
    """The role logs in, holds no power, and its password is stored as SCRAM only."""
    role = reader_url.split("//")[1].split(":")[0]
    row = await raw.fetchrow("SELECT * FROM pg_authid WHERE rolname = $1", role)
    assert row is not None
    assert row["rolcanlogin"]
    powers = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls")
    assert not any(row[p] for p in powers)
    assert row["rolpassword"].startswith("SCRAM-SHA-256$4096:")


async def test_grant_reader_again_updates_the_role(
    raw: asyncpg.Connection, reader_url: str
) -> None:
    """A second run keeps the role and changes its password."""
    role = reader_url.split("//")[1].split(":")[0]
    before = await raw.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role)
    assert await grant_reader(raw, role, "another-secret") == list(READ_VIEWS)
    after = await raw.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role)
    assert before != after


async def test_grant_reader_refuses_the_ledger_owner(raw: asyncpg.Connection) -> None:
    """Turning the role the ledger runs as into a reader is refused, naming the rule."""
    owner = await raw.fetchval("SELECT current_user")
    with pytest.raises(InvalidInput) as refused:
        await grant_reader(raw, owner, "x")
    assert refused.value.invariant == "reader_role_not_ledger_owner"
    assert "choose a new role name" in refused.value.detail


async def test_grant_reader_refuses_a_powerful_existing_role(raw: asyncpg.Connection) -> None:
    """An existing role with CREATEDB is never turned into a reader."""
    role = f"wl_power_{uuid.uuid4().hex[:8]}"
    await raw.execute(f"CREATE ROLE {role} LOGIN CREATEDB")
    try:
        with pytest.raises(InvalidInput) as refused:
            await grant_reader(raw, role, "x")
        assert refused.value.invariant == "reader_role_sees_only_views"
        assert await raw.fetchval("SELECT rolcreatedb FROM pg_roles WHERE rolname = $1", role)
    finally:
        await raw.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("name", ["", "Reader", "pg_reader", "a-b", "x" * 64, 'r"; DROP'])
def test_grant_reader_refuses_bad_role_names(name: str) -> None:
    """Role names are plain lowercase identifiers."""
    with pytest.raises(InvalidInput, match="role name"):
        check_reader_role(name, "x")


def test_scram_verifier_matches_rfc_7677() -> None:
    """The verifier's keys reproduce the RFC 7677 exchange for user/pencil."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = scram_sha256_verifier("pencil", salt=salt, iterations=4096)
    head, keys = verifier.rsplit("$", 1)
    assert head == "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ=="
    stored_key, server_key = (base64.b64decode(k) for k in keys.split(":"))
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (
        f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        f"c=biws,r={nonce}"
    ).encode()
    server_signature = hmac.digest(server_key, auth_message, "sha256")
    assert base64.b64encode(server_signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_key = bytes(
        a ^ b for a, b in zip(proof, hmac.digest(stored_key, auth_message, "sha256"), strict=True)
    )
    assert hashlib.sha256(client_key).digest() == stored_key


@pytest.mark.parametrize(
    "attempt",
    [
        "CREATE TEMP TABLE scratch (x int)",
        "SELECT lo_from_bytea(0, '\\x00'::bytea)",
        "SELECT lo_create(0)",
        "SELECT lo_creat(-1)",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_try_advisory_lock(1)",
        "SELECT pg_advisory_lock(1, 2)",
    ],
)
async def test_reader_cannot_write_even_with_read_only_turned_off(
    reader: asyncpg.Connection, attempt: str
) -> None:
    """With its read-only default SET off, the reader still cannot make a temporary
    table, a large object, or hold an advisory lock (the migrator's among them)."""
    await _read_write(reader)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await reader.execute(attempt)


async def test_ledger_role_keeps_what_the_reader_lost(raw: asyncpg.Connection) -> None:
    """The ledger's own role still takes advisory locks and temporary tables."""
    assert await raw.fetchval("SELECT pg_try_advisory_lock(7)") is True
    await raw.execute("SELECT pg_advisory_unlock(7)")
    await raw.execute("CREATE TEMP TABLE scratch (x int)")


async def test_reader_with_a_wrong_password_is_refused(reader_url: str) -> None:
    """The server checks the reader's password (no trust authentication)."""
    wrong = reader_url.replace(":reader-secret@", ":not-the-secret@")
    assert wrong != reader_url
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(wrong)
