"""What `work-ledger report` reads: rows of the views, in one snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.readside.reading import reading


@dataclass(frozen=True, slots=True)
class Report:
    """What `work-ledger report` shows: rows of the views, as read in one moment."""

    domain: str | None
    queue_depth: list[dict[str, Any]]
    stalled_units: int  # all of them; `stalls` holds the longest silent first, capped
    stalls: list[dict[str, Any]]
    costs: list[dict[str, Any]]
    costliest: list[dict[str, Any]]
    rework: list[dict[str, Any]]
    reworked: list[dict[str, Any]]
    dispositions: list[dict[str, Any]]
    question_wait: list[dict[str, Any]]
    waiting_rows: int  # all of them; `waiting` holds the DEAD- or DEFERRED-held first, capped
    waiting: list[dict[str, Any]]
    budgets: list[dict[str, Any]]
    cost_by_model: list[dict[str, Any]]
    controls: list[dict[str, Any]]
    # The program's course (v_daily, v_forecast): the 28 UTC days before today and today,
    # of the domain or '(all)'; and the forecast's row (its `today`: the UTC date).
    course: list[dict[str, Any]]
    forecast: dict[str, Any]


async def read_report(
    conn: asyncpg.Connection,
    *,
    domain: str | None = None,
    top: int = 20,
    stalls: int | None = 20,
) -> Report:
    """Read every view in one repeatable-read snapshot, so the tables agree with each other.
    `top` units of each per-unit list; `stalls` stalled units (None: every one)."""

    async def rows(name: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in await conn.fetch(QUERIES[name], domain, *args)]

    async with reading(), conn.transaction(isolation="repeatable_read", readonly=True):
        return Report(
            domain=domain,
            queue_depth=await rows("read_queue_depth"),
            stalled_units=await conn.fetchval(QUERIES["read_stall_count"], domain),
            stalls=await rows("read_stall_list", stalls),
            costs=await rows("read_cost_summary"),
            costliest=await rows("read_costliest_units", top),
            rework=await rows("read_rework_rates"),
            reworked=await rows("read_reworked_units", top),
            dispositions=await rows("read_disposition_summary"),
            question_wait=await rows("read_question_wait"),
            waiting_rows=await conn.fetchval(QUERIES["read_waiting_count"], domain),
            waiting=await rows("read_waiting", top),
            budgets=await rows("read_budgets"),
            cost_by_model=await rows("read_cost_by_model"),
            controls=await rows("read_controls"),
            course=await rows("read_course_days"),
            forecast=dict(await conn.fetchrow(QUERIES["read_forecast"], domain) or {}),
        )
