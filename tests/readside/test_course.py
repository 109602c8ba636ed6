"""The program's course (migration 0023): v_daily and v_forecast against a history seeded
with a known pattern (zero days included), and against the service's own writes today,
folded and not; the audit names a broken daily tally and the rebuild repairs it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
from pathlib import Path

import asyncpg
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from work_ledger.api.collectors import LedgerMetrics
from work_ledger.cli import app
from work_ledger.domain.model import Actor, Disposition, NewUnit, Outcome
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
DASHBOARD = Path(__file__).parents[2] / "deploy/grafana/provisioning/dashboards/work-ledger.json"

# MIGRATED per day in `billing`, oldest first: the 28 UTC days before today (index 27 is
# yesterday), then 2 more days before the window that the forecast must not count.
WINDOW = [3, 0, 5, 2, 1, 2, 7, 4, 1, 0, 6, 3, 2, 2, 8, 1, 1, 4, 0, 5, 2, 3, 3, 9, 0, 1, 2, 6]
BEFORE = [10, 10]
# `orders` disposed for the first time 5 days ago: too little history.
ORDERS = [1, 0, 2, 0, 1]
CENTS = 250  # each disposed unit's one attempt costs this, 50 of it estimated
OPEN_BILLING, OPEN_ORDERS = 100, 10

SEED = """
WITH days AS (
    SELECT d.domain, d.ago, d.n
    FROM unnest($1::text[], $2::int[], $3::int[]) AS d (domain, ago, n)
), units AS (
    INSERT INTO work_units (external_ref, fleet, domain, state, disposition, disposed_at,
                            attempt_count, cost_cents, evidence_urls)
    SELECT format('%s-%s-%s', d.domain, d.ago, g), 'fleet-a', d.domain, 'done', 'MIGRATED',
           (wl_utc_day(now()) - d.ago)::timestamp AT TIME ZONE 'UTC' + interval '12 hours',
           1, $4, ARRAY['https://ci.example/' || d.domain || d.ago || '-' || g]
    FROM days AS d CROSS JOIN generate_series(1, d.n) AS g
    RETURNING id, disposed_at
), attempts AS (
    INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, started_at, outcome,
                                    cost_cents, ended_at)
    SELECT id, 1, 'agent-' || (row_number() OVER () % 3), disposed_at - interval '1 hour',
           'verified', $4, disposed_at
    FROM units
    RETURNING id, unit_id, ended_at
)
INSERT INTO cost_records (attempt_id, unit_id, cost_cents, estimated, created_at)
SELECT id, unit_id, $4 - 50, false, ended_at FROM attempts
UNION ALL
SELECT id, unit_id, 50, true, ended_at FROM attempts;
"""


def percentile_cont(values: list[int], fraction: float) -> float:
    """PostgreSQL's percentile_cont: linear between the two nearest ranks."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


async def _seed_history(raw: asyncpg.Connection) -> dt.date:
    domains, agos, counts = [], [], []
    for ago, n in enumerate(reversed(BEFORE + WINDOW), start=1):
        domains.append("billing")
        agos.append(ago)
        counts.append(n)
    for ago, n in enumerate(reversed(ORDERS), start=1):
        domains.append("orders")
        agos.append(ago)
        counts.append(n)
    async with raw.transaction():
        await raw.execute("SET LOCAL session_replication_role = replica")
        await raw.execute(SEED, domains, agos, counts, CENTS)
        await raw.execute(
            "INSERT INTO work_units (external_ref, fleet, domain)"
            " SELECT format('%s-open-%s', d, g), 'fleet-a', d"
            " FROM (VALUES ('billing', $1::int), ('orders', $2::int)) AS x (d, n)"
            " CROSS JOIN generate_series(1, x.n) AS g",
            OPEN_BILLING,
            OPEN_ORDERS,
        )
    await raw.execute("SELECT wl_rebuild_read_summaries()")
    today: dt.date = await raw.fetchval("SELECT wl_utc_day(now())")
    return today


async def test_the_forecast_follows_a_known_pattern_zero_days_included(
    raw: asyncpg.Connection,
) -> None:
    today = await _seed_history(raw)
    billing = await raw.fetchrow("SELECT * FROM v_forecast WHERE domain = 'billing'")
    assert billing is not None
    p50, p15 = percentile_cont(WINDOW, 0.5), percentile_cont(WINDOW, 0.15)
    assert 0 < p15 < p50  # the pattern's zero days pull the 15th percentile down
    assert billing["open_units"] == OPEN_BILLING
    assert billing["history_days"] == 28
    assert billing["disposed_28d"] == sum(WINDOW)
    assert billing["disposed_7d"] == sum(WINDOW[-7:])
    assert float(billing["p50_per_day"]) == p50
    assert math.isclose(float(billing["p15_per_day"]), p15)
    assert billing["days_p50"] == math.ceil(OPEN_BILLING / p50)
    assert billing["days_p85"] == math.ceil(OPEN_BILLING / p15)
    assert billing["date_p50"] == today + dt.timedelta(days=math.ceil(OPEN_BILLING / p50))
    assert billing["date_p85"] == today + dt.timedelta(days=math.ceil(OPEN_BILLING / p15))
    assert billing["spend_p50_cents"] == math.ceil(OPEN_BILLING * sum(WINDOW) * CENTS / sum(WINDOW))
    assert billing["basis"] == "the last 28 days"

    orders = await raw.fetchrow("SELECT * FROM v_forecast WHERE domain = 'orders'")
    assert orders is not None
    assert orders["history_days"] == 5
    assert orders["days_p50"] is None
    assert orders["days_p85"] is None
    assert orders["date_p50"] is None
    assert orders["spend_p50_cents"] is None
    assert "5 of 7 days" in orders["basis"]
    assert "2 more needed" in orders["basis"]

    # '(all)': both domains' days added, orders' zero days and all.
    merged = [n + (ORDERS[i - 23] if i >= 23 else 0) for i, n in enumerate(WINDOW)]
    everything = await raw.fetchrow("SELECT * FROM v_forecast WHERE domain = '(all)'")
    assert everything is not None
    assert everything["open_units"] == OPEN_BILLING + OPEN_ORDERS
    assert float(everything["p50_per_day"]) == percentile_cont(merged, 0.5)
    assert everything["days_p85"] == math.ceil(
        (OPEN_BILLING + OPEN_ORDERS) / percentile_cont(merged, 0.15)
    )


async def test_the_daily_rows_say_each_days_figures(raw: asyncpg.Connection) -> None:
    today = await _seed_history(raw)
    rows = {
        (r["day"], r["domain"]): r
        for r in await raw.fetch("SELECT * FROM v_daily WHERE day < $1", today)
    }
    for ago, n in enumerate(reversed(BEFORE + WINDOW), start=1):
        day = today - dt.timedelta(days=ago)
        row = rows.get((day, "billing"))
        if n == 0:  # a zero day has no row: the forecast counts it all the same
            assert row is None
            continue
        assert row is not None
        assert (row["migrated"], row["disposed"], row["verified"]) == (n, n, n)
        assert (row["cost_cents"], row["estimated_cents"]) == (n * CENTS, n * 50)
        assert row["agents"] == min(n, 3)
        assert row["peak_live"] is None  # a bulk load's days: not counted as they happened
    yesterday = rows[(today - dt.timedelta(days=1), "(all)")]
    assert yesterday["migrated"] == WINDOW[-1] + ORDERS[-1]
    assert await raw.fetch("SELECT * FROM wl_read_summary_drift()") == []


async def test_fewer_than_seven_days_or_none_says_why(raw: asyncpg.Connection) -> None:
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, domain) VALUES ('x', 'fleet-a', 'new')"
    )
    row = await raw.fetchrow("SELECT * FROM v_forecast WHERE domain = 'new'")
    assert row is not None
    assert row["open_units"] == 1
    assert row["days_p50"] is None
    assert row["basis"].startswith("no unit disposed yet")


async def _work(ledger: Ledger, ref: str, agent: str, cost: int) -> tuple[Actor, object]:
    actor = Actor(agent)
    claim = await ledger.claim_named(ref, agent, lease_seconds=3600)
    assert claim.attempt is not None
    await ledger.start(ref, actor, attempt_id=claim.attempt.id)
    await ledger.record_cost(claim.attempt.id, cost, actor)
    return actor, claim.attempt.id


async def _today(raw: asyncpg.Connection, domain: str) -> asyncpg.Record:
    row = await raw.fetchrow(
        "SELECT * FROM v_daily WHERE day = wl_utc_day(now()) AND domain = $1", domain
    )
    assert row is not None
    return row


async def test_todays_writes_are_counted_as_they_happen(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Three units live at once, then each ends its own way: the peak stays 3 after they
    leave, each outcome and disposal counts, agents count once; the same before and after
    a fold, and the audit agrees."""
    refs = ("c1", "c2", "c3", "c4")
    await ledger.register([NewUnit(r, "fleet-a", "course") for r in refs], OPERATOR)
    a1, _ = await _work(ledger, "c1", "agent-1", 100)
    a2, _ = await _work(ledger, "c2", "agent-2", 30)
    _a3, _ = await _work(ledger, "c3", "agent-3", 20)
    await ledger.verify("c1", a1, "https://ci.example/c1")
    await ledger.dispose("c1", Disposition.MIGRATED, a1)
    await ledger.release("c2", a2, outcome=Outcome.FAILED)
    # c3's lease lapses; agent-1 takes it over: c3's first attempt is superseded.
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 minute'"
        " WHERE external_ref = 'c3'"
    )
    await _work(ledger, "c3", "agent-1", 5)
    await ledger.dispose("c4", Disposition.DROPPED, OPERATOR)

    async def check() -> None:
        row = await _today(raw, "course")
        assert (row["migrated"], row["dropped"], row["disposed"]) == (1, 1, 2)
        assert (row["verified"], row["failed"], row["superseded"]) == (1, 1, 1)
        assert (row["split"], row["abandoned"]) == (0, 0)
        assert row["cost_cents"] == 155
        assert row["estimated_cents"] == 0
        assert row["agents"] == 3
        assert row["peak_live"] == 3
        everything = await _today(raw, "(all)")
        assert (everything["disposed"], everything["agents"], everything["peak_live"]) == (2, 3, 3)
        assert await raw.fetch("SELECT * FROM wl_read_summary_drift()") == []

    assert await raw.fetchval("SELECT count(*) FROM wl_day_notes") > 0
    await check()
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    assert await raw.fetchval("SELECT count(*) FROM wl_day_notes") == 0
    await check()
    # Live now is 1 (c3's second attempt), below the day's peak.
    assert (
        await raw.fetchval(
            "SELECT sum(claimed + in_progress) FROM v_queue_depth WHERE scope = 'domain'"
        )
        == 1
    )


# The night shift's attempt moved back to 23:00 yesterday (UTC), its claim's note with it:
# a raw edit, past the guard that keeps an attempt's start.
NIGHT_SHIFT = """
WITH attempt AS (
    UPDATE work_unit_attempts
    SET started_at = wl_utc_day(now())::timestamp AT TIME ZONE 'UTC' - interval '1 hour'
    WHERE agent_id = 'agent-night'
)
UPDATE wl_day_notes SET day = wl_utc_day(now()) - 1 WHERE agent_id = 'agent-night'
"""


async def test_an_attempt_running_since_yesterday_counts_today_once_folded(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """The fold adds today's agents of the attempts running since an earlier day, and only
    those: an attempt begun today was noted for today by its claim, so the fold does not
    read it again (migration 0030). Before a fold, the night shift's agent counts for
    yesterday only; after it, for today too, and the audit agrees."""
    await ledger.register([NewUnit(r, "fleet-a", "course") for r in ("n1", "d1")], OPERATOR)
    await _work(ledger, "n1", "agent-night", 7)
    async with raw.transaction():
        await raw.execute("SET LOCAL session_replication_role = replica")
        await raw.execute(NIGHT_SHIFT)
    await _work(ledger, "d1", "agent-day", 5)
    running = await raw.fetch("SELECT day, domain, agent_id FROM wl_running_agents_today")
    today = await raw.fetchval("SELECT wl_utc_day(now())")
    assert [tuple(r) for r in running] == [(today, "course", "agent-night")]
    assert (await _today(raw, "course"))["agents"] == 1
    assert await raw.fetchval("SELECT wl_fold_read_summaries()") > 0
    assert (await _today(raw, "course"))["agents"] == 2
    assert (await _today(raw, "(all)"))["agents"] == 2
    yesterday = await raw.fetchrow(
        "SELECT agents FROM v_daily WHERE day = $1 AND domain = 'course'",
        today - dt.timedelta(days=1),
    )
    assert yesterday is not None
    assert yesterday["agents"] == 1
    assert await raw.fetch("SELECT * FROM wl_read_summary_drift()") == []


async def test_the_audit_names_a_broken_daily_tally_and_the_rebuild_repairs_it(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register([NewUnit("d1", "fleet-a", "course")], OPERATOR)
    agent, _ = await _work(ledger, "d1", "agent-1", 40)
    await ledger.release("d1", agent, outcome=Outcome.FAILED)
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await raw.execute(
        "UPDATE wl_daily_tallies SET cost_cents = cost_cents + 7, failed = 0"
        " WHERE domain = 'course'"
    )
    drift = await raw.fetch("SELECT * FROM wl_read_summary_drift()")
    assert [d["summary"] for d in drift] == ["wl_daily_tallies"]
    assert drift[0]["key"].endswith("/course")
    audit = await raw.fetch(
        "SELECT detail FROM (" + _audit_sql() + ") AS a WHERE rule = 'read_summary_exact'"
    )
    assert any("wl_daily_tallies" in a["detail"] for a in audit)
    await raw.execute("SELECT wl_rebuild_read_summaries()")
    assert await raw.fetch("SELECT * FROM wl_read_summary_drift()") == []
    row = await _today(raw, "course")
    assert (row["failed"], row["cost_cents"], row["peak_live"]) == (1, 40, 1)


def _audit_sql() -> str:
    from work_ledger.db.queries import QUERIES

    return QUERIES["audit_ledger"].rstrip().rstrip(";")


async def _report(url: str, *args: str) -> str:
    runner = CliRunner(env={"WL_DATABASE_URL": url, "COLUMNS": "80", "NO_COLOR": "1"})
    result = await asyncio.to_thread(runner.invoke, app, ["report", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _day(day: dt.date, today: dt.date) -> str:
    return f"{day.day} {day:%b}" + ("" if day.year == today.year else f" {day.year}")


async def test_the_report_opens_with_the_course_at_80_columns(
    raw: asyncpg.Connection, database_url: str
) -> None:
    today = await _seed_history(raw)
    out = await _report(database_url)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert out.index("The program's course (all domains)") < out.index("v_queue_depth")
    merged = [n + (ORDERS[i - 23] if i >= 23 else 0) for i, n in enumerate(WINDOW)]
    last7, before7 = sum(merged[-7:]), sum(merged[-14:-7])
    row = next(line for line in out.splitlines() if line.startswith("MIGRATED "))
    change = f"{(last7 - before7) / before7 * 100:+.0f}%"
    assert row.split() == ["MIGRATED", str(last7), str(before7), change]
    cost = next(line for line in out.splitlines() if line.startswith("cost per MIGRATED"))
    assert cost.split()[3:5] == ["$2.50", "$2.50"]
    share = next(line for line in out.splitlines() if line.startswith("failed share"))
    assert share.split()[2:4] == ["0.0%", "0.0%"]
    chart = next(line for line in out.splitlines() if line.startswith("MIGRATED a day"))
    bars = chart.split("|")[1]
    assert len(bars) == 28
    assert [c == " " for c in bars] == [n == 0 for n in merged]
    assert bars[merged.index(max(merged))] == "█"
    assert chart.endswith(f"most {max(merged)}")
    opened = OPEN_BILLING + OPEN_ORDERS
    p50, p15 = percentile_cont(merged, 0.5), percentile_cont(merged, 0.15)
    early = today + dt.timedelta(days=math.ceil(opened / p50))
    late = today + dt.timedelta(days=math.ceil(opened / p15))
    sentence = (
        f"{opened:,} units open; at the last 28 days' pace done between {_day(early, today)}"
        f" (P50) and {_day(late, today)} (P85), about ${opened * CENTS / 100:,.0f} more"
    )
    assert sentence in " ".join(out.split())


async def test_the_report_for_a_young_domain_says_how_much_more_history_it_needs(
    raw: asyncpg.Connection, database_url: str
) -> None:
    await _seed_history(raw)
    out = " ".join((await _report(database_url, "--domain", "orders")).split())
    assert "The program's course (orders)" in out
    assert f"{OPEN_ORDERS} units open; no forecast yet: 5 of 7 days of history" in out
    assert "2 more needed" in out
    assert "(P50)" not in out


async def test_metrics_export_the_forecast_and_the_open_units(raw: asyncpg.Connection) -> None:
    """/metrics: work_ledger_forecast_days per domain and quantile as v_forecast says, no
    sample where the history is too short; work_ledger_open_units for every scope."""
    await _seed_history(raw)
    metrics = LedgerMetrics()
    await metrics.refresh(raw)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    for f in await raw.fetch("SELECT * FROM v_forecast"):
        domain = f["domain"]
        assert samples[("work_ledger_open_units", (("domain", domain),))] == f["open_units"]
        for quantile, days in (("0.5", f["days_p50"]), ("0.85", f["days_p85"])):
            key = ("work_ledger_forecast_days", (("domain", domain), ("quantile", quantile)))
            assert samples.get(key) == days
    everything = ("work_ledger_forecast_days", (("domain", "(all)"), ("quantile", "0.85")))
    assert samples[everything] > 0
    assert ("work_ledger_forecast_days", (("domain", "orders"), ("quantile", "0.5"))) not in (
        samples
    )


def test_grafana_has_the_course_row() -> None:
    """The second row: daily MIGRATED by domain, cost per MIGRATED, failed share against
    peak live units, and the forecast, each reading v_daily or v_forecast."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert panels["The program's course"]["type"] == "row"
    for title, view in (
        ("Daily MIGRATED by domain", "v_daily"),
        ("Cost per MIGRATED per day", "v_daily"),
        ("Failed share against peak live units", "v_daily"),
        ("Forecast", "v_forecast"),
    ):
        (target,) = panels[title]["targets"]
        assert f"FROM {view}" in target["rawSql"], title
    assert panels["Forecast"]["type"] == "stat"
