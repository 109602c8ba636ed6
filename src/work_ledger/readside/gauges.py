"""What /metrics reads from the views: one query per scrape (api/collectors.py caches it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from work_ledger.db.queries import QUERIES
from work_ledger.readside.reading import Conn, reading

STATES = (
    "ready",
    "waiting",
    "claimed",
    "in_progress",
    "blocked",
    "verified",
    "done",
    "abandoned",
)


# Why a waiting unit waits (v_waiting), as /metrics labels it.
WAIT_REASONS = (
    "unfinished_prerequisite",
    "deferred_prerequisite",
    "dead_prerequisite",
    "attempt_limit",
)


@dataclass(frozen=True, slots=True)
class Waiting:
    """Units of one domain waiting for one reason, and the oldest one's wait in seconds."""

    units: int
    oldest_seconds: int


@dataclass(frozen=True, slots=True)
class BudgetGauge:
    cap_cents: int
    spent_cents: int
    remaining_cents: int


@dataclass(frozen=True, slots=True)
class ControlGauge:
    """A controlled scope (DESIGN §13): live units, its cap (None: none), paused, for how
    long (seconds, 0 when not), and its ready units."""

    live: int
    cap: int | None
    paused: bool
    paused_seconds: int
    ready: int


@dataclass(frozen=True, slots=True)
class ForecastGauge:
    """A scope's open units and the forecast's days (None: too little history)."""

    open_units: int
    days_p50: int | None
    days_p85: int | None


@dataclass(frozen=True, slots=True)
class GaugeSnapshot:
    """From one query: units by (domain, state), and by domain the stalled units, the
    attempts ever started (one per claim) and the attempts lost to a stale reclaim; by
    assignee group the open questions and the oldest open one's age in seconds; waiting
    units by (domain, reason); each budget by (fleet, domain: "(all)" for the fleet's);
    per domain and "(all)" the open units and the forecast's days (v_forecast)."""

    units: dict[tuple[str, str], int]
    stalled: dict[str, int]
    claims: dict[str, int]
    reclaims: dict[str, int]
    open_questions: dict[str, int]
    oldest_question_seconds: dict[str, int]
    waiting: dict[tuple[str, str], Waiting]
    budgets: dict[tuple[str, str], BudgetGauge]
    controls: dict[tuple[str, str], ControlGauge]
    forecast: dict[str, ForecastGauge]

    @property
    def domains(self) -> set[str]:
        return {domain for domain, _ in self.units}


def _json(value: Any) -> Any:
    # A pool from work_ledger.db.connect decodes jsonb; a bare connection hands back text.
    return json.loads(value) if isinstance(value, str) else value


def _by_domain(value: Any, domains: set[str]) -> dict[str, int]:
    counts = {domain: 0 for domain in domains}
    counts.update({str(k): int(v) for k, v in _json(value).items()})
    return counts


async def read_gauges(conn: Conn) -> GaugeSnapshot:
    async with reading():
        row = await conn.fetchrow(QUERIES["read_metrics_snapshot"])
    assert row is not None  # a SELECT of scalar subqueries always returns one row
    units = {
        (str(r["domain"]), state): int(r[state])
        for r in _json(row["queue_depth"])
        for state in STATES
    }
    domains = {domain for domain, _ in units}
    waits = _json(row["question_wait"])
    return GaugeSnapshot(
        units,
        _by_domain(row["stalled"], domains),
        _by_domain(row["claims"], domains),
        _by_domain(row["reclaims"], domains),
        {str(w["group"]): int(w["open"]) for w in waits},
        {str(w["group"]): int(w["oldest"]) for w in waits},
        {
            (str(w["domain"]), str(w["reason"])): Waiting(int(w["units"]), int(w["oldest"]))
            for w in _json(row["waiting"])
        },
        {
            (str(b["fleet"]), str(b["domain"])): BudgetGauge(
                int(b["cap"]), int(b["spent"]), int(b["remaining"])
            )
            for b in _json(row["budgets"])
        },
        {
            (str(c["fleet"]), str(c["domain"])): ControlGauge(
                int(c["live"]),
                None if c["cap"] is None else int(c["cap"]),
                bool(c["paused"]),
                int(c["paused_seconds"] or 0),
                int(c["ready"]),
            )
            for c in _json(row["controls"])
        },
        {
            str(f["domain"]): ForecastGauge(int(f["open"]), _days(f["p50"]), _days(f["p85"]))
            for f in _json(row["forecast"])
        },
    )


def _days(value: Any) -> int | None:
    return None if value is None else int(value)
