"""The five views of migration 0004, read over the known ledger of conftest.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import asyncpg

from work_ledger.readside.pool import store_settings
from work_ledger.readside.roles import READ_VIEWS
from work_ledger.service.ledger import Ledger


async def _rows(raw: asyncpg.Connection, sql: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await raw.fetch(sql)]


def _pick(rows: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in rows]


async def test_views_are_the_five_documented_ones(raw: asyncpg.Connection) -> None:
    """Exactly the documented views exist, each with a COMMENT ON VIEW, each a security
    barrier. (The wl_*_scan views are the tallies' full scans, for audit and rebuild.)"""
    rows = await raw.fetch(
        "SELECT c.relname, obj_description(c.oid, 'pg_class') AS comment, c.reloptions"
        " FROM pg_class AS c WHERE c.relkind = 'v' AND c.relnamespace = 'public'::regnamespace"
        " AND c.relname LIKE 'v\\_%' ORDER BY c.relname"
    )
    assert sorted(READ_VIEWS) == [r["relname"] for r in rows]
    assert all(r["comment"] and len(r["comment"]) > 40 for r in rows)
    assert all(r["reloptions"] == ["security_barrier=true"] for r in rows)


async def test_queue_depth_counts_each_state_per_domain_and_in_total(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """One row per domain plus the total row, a column per state."""
    rows = await _rows(raw, "SELECT * FROM v_queue_depth ORDER BY scope, domain")
    keys = ("scope", "domain", "ready", "claimed", "in_progress", "blocked", "verified")
    keys += ("done", "abandoned", "open", "units")
    assert _pick(rows, *keys) == [
        ("domain", "billing", 1, 0, 0, 0, 0, 2, 1, 1, 4),
        ("domain", "orders", 0, 1, 1, 0, 0, 0, 2, 2, 4),
        ("domain", "search", 0, 0, 0, 1, 1, 0, 1, 2, 3),
        ("total", "(all)", 1, 1, 1, 1, 1, 2, 4, 5, 11),
    ]


async def test_queue_depth_has_a_zero_total_row_when_empty(raw: asyncpg.Connection) -> None:
    """An empty ledger still shows the total row, all zeros."""
    rows = await _rows(raw, "SELECT * FROM v_queue_depth")
    assert _pick(rows, "scope", "domain", "ready", "units") == [("total", "(all)", 0, 0)]


async def test_stall_list_shows_the_silent_leased_unit_only(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """o3 is stalled; the blocked s1, as silent, is not; the fresh o4 is not."""
    rows = await _rows(raw, "SELECT * FROM v_stall_list")
    assert _pick(rows, "external_ref", "domain", "state", "holder", "attempt_no") == [
        ("o3", "orders", "in_progress", "agent-f", 1)
    ]
    (row,) = rows
    assert 600 <= row["stalled_seconds"] <= 660
    assert row["stall_threshold_seconds"] == 300
    assert row["lease_expired"] is False
    assert row["lease_expires_at"] > dt.datetime.now(dt.UTC)
    detail = await seeded.get_unit("o3")
    assert row["attempt_id"] == detail.attempts[-1].id


async def test_stall_list_follows_the_stored_threshold(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Raising WL_STALL_SECONDS past the silence empties the list; lowering it refills it."""
    await store_settings(raw, stall_seconds=900)
    assert await raw.fetchval("SELECT count(*) FROM v_stall_list") == 0
    await store_settings(raw, stall_seconds=60)
    assert await raw.fetchval("SELECT stall_threshold_seconds FROM v_stall_list") == 60


async def test_cost_per_unit_per_domain_and_total(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """Spend, cost per unit, per merged unit, and all spend per merged unit."""
    rows = await _rows(raw, "SELECT * FROM v_cost_per_unit WHERE scope <> 'unit'")
    keys = ("scope", "domain", "units", "attempts", "cost_cents", "merged_units")
    keys += ("merged_cost_cents", "cost_per_unit_cents", "cost_per_merged_unit_cents")
    keys += ("spend_per_merged_unit_cents",)
    d = Decimal
    assert sorted(_pick(rows, *keys)) == [
        ("domain", "billing", 4, 3, 220, 2, 220, d("55.00"), d("110.00"), d("110.00")),
        ("domain", "orders", 4, 5, 100, 0, 0, d("25.00"), None, None),
        ("domain", "search", 3, 2, 40, 0, 0, d("13.33"), None, None),
        ("total", "(all)", 11, 10, 360, 2, 220, d("32.73"), d("110.00"), d("180.00")),
    ]


async def test_cost_per_unit_has_one_row_per_unit(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """Every unit appears once with its attempts and cost."""
    rows = await _rows(raw, "SELECT * FROM v_cost_per_unit WHERE scope = 'unit'")
    by_ref = {r["external_ref"]: (r["attempts"], r["cost_cents"], r["merged_units"]) for r in rows}
    assert by_ref == {
        "b1": (1, 100, 1),
        "b2": (2, 120, 1),
        "b3": (0, 0, 0),
        "b4": (0, 0, 0),
        "o1": (2, 50, 0),
        "o2": (1, 40, 0),
        "o3": (1, 10, 0),
        "o4": (1, 0, 0),
        "s1": (1, 15, 0),
        "s2": (1, 25, 0),
        "s3": (0, 0, 0),
    }


async def test_rework_lists_units_with_more_than_one_attempt(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """b2 (stale reclaim) and o1 (released failed) are the reworked units."""
    rows = await _rows(raw, "SELECT * FROM v_rework WHERE scope = 'unit' ORDER BY external_ref")
    keys = ("external_ref", "domain", "disposition", "attempts", "extra_attempts")
    keys += ("superseded_attempts", "released_attempts", "rework_rate")
    assert _pick(rows, *keys) == [
        ("b2", "billing", "MIGRATED", 2, 1, 1, 0, Decimal("1.0000")),
        ("o1", "orders", "DEAD", 2, 1, 0, 1, Decimal("1.0000")),
    ]


async def test_rework_rate_per_domain_and_total(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """The rate is reworked units over units claimed at least once."""
    rows = await _rows(raw, "SELECT * FROM v_rework WHERE scope IN ('domain', 'total')")
    keys = ("scope", "domain", "attempted_units", "reworked_units", "attempts")
    keys += ("extra_attempts", "superseded_attempts", "released_attempts", "rework_rate")
    assert sorted(_pick(rows, *keys)) == [
        ("domain", "billing", 2, 1, 3, 1, 1, 0, Decimal("0.5000")),
        ("domain", "orders", 4, 1, 5, 1, 0, 1, Decimal("0.2500")),
        ("domain", "search", 2, 0, 2, 0, 0, 0, Decimal("0.0000")),
        ("total", "(all)", 8, 2, 10, 2, 1, 1, Decimal("0.2500")),
    ]


async def test_rework_rate_per_day_counts_closed_units(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Scope day: units disposed today that were ever claimed, per domain."""
    today = await raw.fetchval("SELECT date_trunc('day', now(), 'UTC')")
    rows = await _rows(raw, "SELECT * FROM v_rework WHERE scope = 'day'")
    keys = ("domain", "day", "attempted_units", "reworked_units", "rework_rate")
    assert sorted(_pick(rows, *keys)) == [
        ("billing", today, 2, 1, Decimal("0.5000")),
        ("orders", today, 2, 1, Decimal("0.5000")),
    ]


async def test_disposition_summary_in_total_lists_all_four(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Count, cost and every evidence link per disposition, zero rows included."""
    rows = await _rows(
        raw, "SELECT * FROM v_disposition_summary WHERE scope = 'total' ORDER BY disposition"
    )
    keys = ("disposition", "units", "attempts", "cost_cents", "cost_per_unit_cents")
    keys += ("units_without_evidence", "evidence_urls", "evidence_url_count")
    b2 = ["https://ci.example/b1", "https://ci.example/b2", "https://review.example/b2"]
    assert _pick(rows, *keys) == [
        ("MIGRATED", 2, 3, 220, Decimal("110.00"), 0, b2, 3),
        ("DROPPED", 1, 0, 0, Decimal("0.00"), 0, ["https://review.example/b3-dup"], 1),
        ("DEFERRED", 1, 1, 40, Decimal("40.00"), 1, [], 0),
        ("DEAD", 2, 2, 50, Decimal("25.00"), 1, ["https://review.example/o1"], 1),
    ]


async def test_disposition_summary_per_domain(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """One row per (disposition, domain) that has units."""
    rows = await _rows(raw, "SELECT * FROM v_disposition_summary WHERE scope = 'domain'")
    keys = ("disposition", "domain", "units", "cost_cents", "evidence_url_count")
    assert sorted(_pick(rows, *keys)) == [
        ("DEAD", "orders", 1, 50, 1),
        ("DEAD", "search", 1, 0, 0),
        ("DEFERRED", "orders", 1, 40, 0),
        ("DROPPED", "billing", 1, 0, 1),
        ("MIGRATED", "billing", 2, 220, 3),
    ]


async def test_disposition_summary_when_nothing_is_disposed(raw: asyncpg.Connection) -> None:
    """An empty ledger shows four zero rows, one per disposition, no evidence."""
    rows = await _rows(raw, "SELECT * FROM v_disposition_summary ORDER BY disposition")
    assert _pick(rows, "disposition", "units", "cost_cents", "evidence_urls") == [
        ("MIGRATED", 0, 0, []),
        ("DROPPED", 0, 0, []),
        ("DEFERRED", 0, 0, []),
        ("DEAD", 0, 0, []),
    ]
