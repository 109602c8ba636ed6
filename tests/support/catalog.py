"""A database's catalog as text, to compare two databases that should hold the same schema.

`catalog(conn)` reads, for the `public` schema, every relation (kind, persistence, options,
privileges), column (in order, type, nullability, default, identity, generation), constraint,
index, trigger, rule, policy, function (its whole definition and privileges), view (its
definition), enum (its labels in order), sequence, comment and table's row count, and what
the ledger changed outside it: the privileges on pg_catalog functions and on the database
itself. Each object is one entry, keyed by kind and name; `difference` renders what differs
between two catalogs as a unified diff per object. Object ids and the order objects were
made in never appear, so two databases built differently compare equal when their schemas are.
"""

from __future__ import annotations

import difflib

import asyncpg

Catalog = dict[str, str]

_PUBLIC = "'public'::regnamespace"

# Debian's PostgreSQL 15.20 writes a `pg_attver=<number>` option on every column it makes,
# a number that differs between two builds of the same table: it is no part of the schema.

# (kind, SQL returning (name, text) rows). Every statement names its objects by what a
# reader would write, never by oid.
_QUERIES: list[tuple[str, str]] = [
    (
        "relation",
        f"""SELECT c.relname, concat_ws(' ', c.relkind, c.relpersistence,
                'options=' || c.reloptions::text, 'rls=' || c.relrowsecurity,
                'replica_identity=' || c.relreplident::text, 'acl=' || c.relacl::text)
            FROM pg_class AS c WHERE c.relnamespace = {_PUBLIC}""",
    ),
    (
        "column",
        f"""SELECT c.relname || '.' || a.attname, concat_ws(' ',
                '#' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                format_type(a.atttypid, a.atttypmod), CASE WHEN a.attnotnull THEN 'not null' END,
                'default ' || pg_get_expr(d.adbin, d.adrelid), 'identity=' || a.attidentity::text,
                'generated=' || a.attgenerated::text,
                'collation=' || a.attcollation::regcollation::text,
                'options=' || (SELECT array_agg(o ORDER BY o)::text FROM unnest(a.attoptions) AS o
                               WHERE o NOT LIKE 'pg\\_attver=%'),
                'acl=' || a.attacl::text)
            FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
            LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = {_PUBLIC} AND a.attnum > 0 AND NOT a.attisdropped
              AND c.relkind IN ('r', 'p', 'v', 'm', 'f')""",
    ),
    (
        "constraint",
        f"""SELECT coalesce(c.conrelid::regclass::text, c.contypid::regtype::text) || ' '
                || c.conname, c.contype::text || ' ' || pg_get_constraintdef(c.oid)
            FROM pg_constraint AS c WHERE c.connamespace = {_PUBLIC}""",
    ),
    (
        "index",
        f"""SELECT c.relname, pg_get_indexdef(c.oid)
            FROM pg_class AS c WHERE c.relnamespace = {_PUBLIC} AND c.relkind IN ('i', 'I')""",
    ),
    (
        "trigger",
        f"""SELECT t.tgrelid::regclass::text || ' ' || t.tgname,
                t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid)
            FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
            WHERE c.relnamespace = {_PUBLIC} AND NOT t.tgisinternal""",
    ),
    (
        "rule",
        "SELECT tablename || ' ' || rulename, definition FROM pg_rules WHERE schemaname = 'public'",
    ),
    (
        "policy",
        "SELECT tablename || ' ' || policyname, concat_ws(' ', permissive, roles::text, cmd, "
        "qual, with_check) FROM pg_policies WHERE schemaname = 'public'",
    ),
    (
        "function",
        f"""SELECT p.oid::regprocedure::text,
                CASE WHEN p.prokind = 'a' THEN 'aggregate' ELSE pg_get_functiondef(p.oid) END
                || E'\\nacl=' || coalesce(p.proacl::text, 'default')
            FROM pg_proc AS p WHERE p.pronamespace = {_PUBLIC}""",
    ),
    (
        "view",
        f"""SELECT c.relname, pg_get_viewdef(c.oid)
            FROM pg_class AS c WHERE c.relnamespace = {_PUBLIC} AND c.relkind IN ('v', 'm')""",
    ),
    (
        "type",
        f"""SELECT t.typname, t.typtype::text || ' ' || coalesce(
                (SELECT string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder)
                 FROM pg_enum AS e WHERE e.enumtypid = t.oid),
                format_type(t.typbasetype, t.typtypmod)) || ' acl=' || coalesce(t.typacl::text, '')
            FROM pg_type AS t WHERE t.typnamespace = {_PUBLIC} AND t.typtype IN ('e', 'd')""",
    ),
    (
        "sequence",
        """SELECT s.sequencename, concat_ws(' ', s.data_type, s.start_value, s.min_value,
                s.max_value, s.increment_by, s.cycle, s.cache_size, 'owned by ' || (
                    SELECT d.refobjid::regclass::text || '.' || a.attname
                    FROM pg_depend AS d JOIN pg_attribute AS a
                      ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                    WHERE d.objid = (quote_ident(s.sequencename))::regclass
                      AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
            FROM pg_sequences AS s WHERE s.schemaname = 'public'""",
    ),
    (
        "comment",
        """SELECT d.classoid::regclass::text || ' ' || coalesce(
                    (SELECT c.relname || coalesce('.' || a.attname, '') FROM pg_class AS c
                     LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = d.objsubid
                     WHERE d.classoid = 'pg_class'::regclass AND c.oid = d.objoid),
                    (SELECT p.oid::regprocedure::text FROM pg_proc AS p
                     WHERE d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid),
                    (SELECT t.typname FROM pg_type AS t
                     WHERE d.classoid = 'pg_type'::regclass AND t.oid = d.objoid),
                    (SELECT c.conname FROM pg_constraint AS c
                     WHERE d.classoid = 'pg_constraint'::regclass AND c.oid = d.objoid),
                    (SELECT t.tgname FROM pg_trigger AS t
                     WHERE d.classoid = 'pg_trigger'::regclass AND t.oid = d.objoid),
                    d.objoid::text), d.description
            FROM pg_description AS d
            WHERE d.classoid IN ('pg_class'::regclass, 'pg_proc'::regclass, 'pg_type'::regclass,
                                 'pg_constraint'::regclass, 'pg_trigger'::regclass)
              AND d.objoid >= 16384""",  # the ledger's own objects, not the system's
    ),
    (
        "extension",
        "SELECT extname, extversion FROM pg_extension",
    ),
    (
        "privilege outside public",
        """SELECT 'function ' || p.oid::regprocedure::text, p.proacl::text FROM pg_proc AS p
            WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proacl IS NOT NULL
            UNION ALL
            SELECT 'schema ' || n.nspname, coalesce(n.nspacl::text, 'default')
            FROM pg_namespace AS n WHERE n.nspname = 'public'
            UNION ALL
            SELECT 'database', coalesce(d.datacl::text, 'default') FROM pg_database AS d
            WHERE d.datname = current_database()""",
    ),
]

# The migrator's own record: one row per migration applied, which a database built from
# schema.sql never ran.
_UNCOUNTED = {"wl_schema_migrations"}


async def catalog(conn: asyncpg.Connection) -> Catalog:
    """Every object of the database's schema, `"kind name"` → its definition."""
    found: Catalog = {}
    for kind, sql in _QUERIES:
        for name, text in await conn.fetch(sql):
            found[f"{kind} {name}"] = text
    await _reparsed(conn, found)
    tables = await conn.fetch(
        f"SELECT relname FROM pg_class WHERE relnamespace = {_PUBLIC} AND relkind = 'r'"
    )
    for (table,) in tables:
        if table not in _UNCOUNTED:
            rows = await conn.fetchval(f'SELECT count(*) FROM "{table}"')
            found[f"rows of {table}"] = str(rows)
    return found


_SCRATCH = "wl_catalog_reparsed"


async def _reparsed(conn: asyncpg.Connection, found: Catalog) -> None:
    """Views and trigger conditions as PostgreSQL renders them once its rendering is parsed
    again, which is what any dump and restore (schema.sql included) keeps: a parse is not
    a fixed point of the rendering (`(a OR b) OR c` comes back `a OR b OR c`, an unnamed
    UNION column comes back `AS text`), but one round trip is. Done in a transaction that
    is rolled back, so the database is left as it was."""
    change = conn.transaction()
    await change.start()
    try:
        for key, text in found.items():
            kind, _, name = key.partition(" ")
            if kind == "view":
                await conn.execute(f"CREATE VIEW {_SCRATCH} AS {text}")
                found[key] = await conn.fetchval(f"SELECT pg_get_viewdef('{_SCRATCH}'::regclass)")
                await conn.execute(f"DROP VIEW {_SCRATCH}")
            elif kind == "trigger":
                table, trigger = name.split(" ")
                state, definition = text.split(" ", 1)
                await conn.execute(definition.replace(f" {trigger} ", f" {_SCRATCH} ", 1))
                again = await conn.fetchval(
                    "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = $1", _SCRATCH
                )
                found[key] = f"{state} {again.replace(f' {_SCRATCH} ', f' {trigger} ', 1)}"
                await conn.execute(f"DROP TRIGGER {_SCRATCH} ON {table}")
    finally:
        await change.rollback()


def difference(expected: Catalog, actual: Catalog, *, expected_name: str, actual_name: str) -> str:
    """What differs, object by object, as unified diffs ('' when the catalogs are equal)."""
    parts = []
    for key in sorted(expected.keys() | actual.keys()):
        before, after = expected.get(key), actual.get(key)
        if before == after:
            continue
        if before is None or after is None:
            where = expected_name if after is None else actual_name
            parts.append(f"{key}: only in {where}\n    {(before or after or '')[:400]}")
            continue
        diff = difflib.unified_diff(
            before.splitlines(), after.splitlines(), expected_name, actual_name, lineterm=""
        )
        parts.append(f"{key}: differs\n" + "\n".join(diff))
    return "\n\n".join(parts)
