"""v_question_wait: how long units wait on people, in the view, /metrics and the report."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import asyncpg
from asyncpg import Pool
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from work_ledger.api.collectors import LedgerMetrics
from work_ledger.cli import app
from work_ledger.db.connect import ensure_database, with_database
from work_ledger.db.migrate import apply_migrations, load_migrations
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.readside.roles import grant_reader
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
COLUMNS = (
    "open_questions",
    "unrouted_questions",
    "oldest_open_seconds",
    "open_p50_seconds",
    "answered_questions",
    "answer_p50_seconds",
    "answer_p90_seconds",
    "cancelled_questions",
)


async def _unit(ledger: Ledger, ref: str, domain: str) -> object:
    await ledger.register([NewUnit(ref, "fleet-a", domain)], OPERATOR)
    return (await ledger.get_unit(ref)).unit.id


async def _question(
    raw: asyncpg.Connection,
    unit_id: object,
    *,
    group: str,
    age_seconds: int,
    answered_after: int | None = None,
    routed: str | None = None,
) -> None:
    """A question asked `age_seconds` ago; answered `answered_after` seconds after asking."""
    await raw.execute(
        """
        INSERT INTO blocking_questions
            (unit_id, question, assignee_group_slug, external_task_id, created_at, status,
             answer, closed_at)
        SELECT $1, 'q?', $2, $3, t.asked,
               CASE WHEN $4::int IS NULL THEN 'open' ELSE 'answered' END::question_status,
               CASE WHEN $4::int IS NULL THEN NULL ELSE 'a' END,
               t.asked + make_interval(secs => $4::int)
        FROM (SELECT now() - make_interval(secs => $5::int) AS asked) AS t
        """,
        unit_id,
        group,
        routed,
        answered_after,
        age_seconds,
    )


async def _rows(raw: asyncpg.Connection) -> dict[tuple[str, str, str], tuple[object, ...]]:
    rows = await raw.fetch("SELECT * FROM v_question_wait")
    return {
        (r["scope"], r["domain"], r["assignee_group_slug"]): tuple(r[c] for c in COLUMNS)
        for r in rows
    }


async def test_question_wait_on_an_empty_ledger_is_one_total_row(raw: asyncpg.Connection) -> None:
    """Nothing asked yet: the total row alone, zero counts and no percentiles."""
    expected = {("total", "(all)", "(all)"): (0, 0, 0, None, 0, None, None, 0)}
    assert await _rows(raw) == expected


async def test_question_wait_by_group_domain_and_total(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Open counts and ages per assignee group and per domain; answer p50/p90 per domain."""
    orders = [await _unit(ledger, f"o{i}", "orders") for i in range(11)]
    search = await _unit(ledger, "s1", "search")
    for i, unit in enumerate(orders[:10]):  # answered after 10, 20, ... 100 seconds
        await _question(raw, unit, group="legal", age_seconds=1000, answered_after=10 * (i + 1))
    await _question(raw, orders[10], group="legal", age_seconds=3600, routed="HQ-1")
    await _question(raw, search, group="owners", age_seconds=600)

    rows = await _rows(raw)
    # Ages grow while the test runs: compare them in whole minutes.
    aged = {
        k: (*v[:2], v[2] // 60, v[3] // 60 if v[3] is not None else None, *v[4:])
        for k, v in rows.items()
    }
    # p50 of 10..100 s is 55 s, p90 is 91 s (linear interpolation, percentile_cont).
    assert aged[("domain", "orders", "(all)")] == (
        1,
        0,
        60,
        60,
        10,
        Decimal("55.0"),
        Decimal("91.0"),
        0,
    )
    assert aged[("domain", "search", "(all)")] == (1, 1, 10, 10, 0, None, None, 0)
    assert aged[("group", "(all)", "legal")][:5] == (1, 0, 60, 60, 10)
    assert aged[("group", "(all)", "owners")][:3] == (1, 1, 10)
    assert aged[("total", "(all)", "(all)")][:5] == (2, 1, 60, 35, 10)  # p50 of 3600 and 600
    assert len(rows) == 5


async def test_open_questions_equal_the_group_rows_of_question_wait(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """v_open_questions (what /metrics reads, from an index) says what v_question_wait's
    group rows say: every group that has had a question, none open included."""
    units = [await _unit(ledger, f"q{i}", "orders") for i in range(5)]
    await _question(raw, units[0], group="legal", age_seconds=900)
    await _question(raw, units[1], group="legal", age_seconds=300, answered_after=10)
    await _question(raw, units[2], group="owners", age_seconds=60, answered_after=5)
    await _question(raw, units[3], group="zeta", age_seconds=30)
    await _question(raw, units[4], group="alpha", age_seconds=7200)
    compare = (
        "SELECT assignee_group_slug, open_questions, oldest_open_seconds FROM v_question_wait"
        " WHERE scope = 'group' {} SELECT assignee_group_slug, open_questions,"
        " oldest_open_seconds FROM v_open_questions"
    )
    async with raw.transaction(isolation="repeatable_read"):  # one now() for both sides
        assert await raw.fetch(compare.format("EXCEPT ALL")) == []
        assert await raw.fetch(compare.format("UNION ALL")) != []
        swapped = (
            "SELECT assignee_group_slug, open_questions, oldest_open_seconds FROM"
            " v_open_questions EXCEPT ALL SELECT assignee_group_slug, open_questions,"
            " oldest_open_seconds FROM v_question_wait WHERE scope = 'group'"
        )
        assert await raw.fetch(swapped) == []
    assert await raw.fetchval("SELECT count(*) FROM v_open_questions") == 4


async def test_metrics_gauge_open_questions_and_oldest_age_by_group(
    ledger: Ledger, pool: Pool, raw: asyncpg.Connection
) -> None:
    """work_ledger_open_questions and work_ledger_oldest_open_question_seconds per group."""
    first, second = await _unit(ledger, "a", "orders"), await _unit(ledger, "b", "orders")
    await _question(raw, first, group="legal", age_seconds=7200)
    await _question(raw, second, group="owners", age_seconds=60, answered_after=5)
    metrics = LedgerMetrics()
    await metrics.refresh(pool)
    samples = {
        (s.name, s.labels["assignee_group_slug"]): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if "question" in s.name
    }
    assert samples[("work_ledger_open_questions", "legal")] == 1
    assert samples[("work_ledger_open_questions", "owners")] == 0
    assert 7200 <= samples[("work_ledger_oldest_open_question_seconds", "legal")] < 7200 + 600
    assert samples[("work_ledger_oldest_open_question_seconds", "owners")] == 0


async def test_report_shows_who_is_waiting(seeded: Ledger, database_url: str) -> None:
    """`work-ledger report` prints v_question_wait: the seeded s1 question is open."""
    runner = CliRunner(env={"WL_DATABASE_URL": database_url, "COLUMNS": "220", "NO_COLOR": "1"})
    result = await asyncio.to_thread(runner.invoke, app, ["report"])
    assert result.exit_code == 0, result.output
    section = result.output.split("v_question_wait", 1)[1]
    row = next(line for line in section.splitlines() if "agent-questions" in line)
    cells = [c.strip() for c in row.strip().strip("│┃").split("│")]
    assert cells[:3] == ["agent-questions", "1", "1"]  # one open, not routed
    assert cells[5] == "1"  # one answered (o1)


async def test_migration_0007_lets_an_existing_reader_read_the_new_view(server_url: str) -> None:
    """A reader made before 0007 reads v_question_wait once 0007 is applied, without
    running grant-reader again."""
    name, role = f"wl_upgrade_{uuid.uuid4().hex[:10]}", f"wl_reader_{uuid.uuid4().hex[:10]}"
    await ensure_database(server_url, name)
    url = with_database(server_url, name)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE wl_schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in [m for m in load_migrations() if m.version < 7]:
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO wl_schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
        await grant_reader(conn, role, "reader-secret")  # the 0004 function: five views
        assert 7 in [m.version for m in await apply_migrations(conn)]
        reader = await asyncpg.connect(url, user=role, password="reader-secret")
        try:
            assert await reader.fetchval("SELECT scope FROM v_question_wait") == "total"
        finally:
            await reader.close()
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')
    finally:
        await conn.close()
        admin = await asyncpg.connect(server_url)
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()
