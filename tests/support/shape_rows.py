"""What the shape-and-money checkers read: the ledger's rows as plain mappings (so that a
test can doctor them), the report, and the predicates both checkers share."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from support.workload import Op

Row = Mapping[str, Any]
FAILED = frozenset({"failed", "abandoned", "superseded"})
TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass
class Tables:
    events: list[Row]
    units: list[Row]
    attempts: list[Row]
    requirements: list[Row]
    caps: list[Row]  # budget_caps, oldest first
    spent: list[Row]  # per budget: fleet, domain, spent (wl_scope_spent)
    questions: list[Row]
    cost_records: list[Row]


async def load(conn: asyncpg.Connection) -> Tables:
    def rows(records: list[asyncpg.Record]) -> list[Row]:
        return [dict(r) for r in records]

    return Tables(
        rows(await conn.fetch("SELECT * FROM work_unit_events ORDER BY id")),
        rows(await conn.fetch("SELECT * FROM work_units")),
        rows(await conn.fetch("SELECT * FROM work_unit_attempts")),
        rows(await conn.fetch("SELECT * FROM unit_requirements")),
        rows(await conn.fetch("SELECT * FROM budget_caps ORDER BY id")),
        rows(
            await conn.fetch(
                "SELECT fleet, domain, wl_scope_spent(fleet, domain) AS spent FROM budgets"
            )
        ),
        rows(await conn.fetch("SELECT * FROM blocking_questions")),
        rows(await conn.fetch("SELECT * FROM cost_records")),
    )


@dataclass
class ShapeReport:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"shape and money: {counts}\nshape violations: {len(self.violations)}" + "".join(
            f"\n  - {v}" for v in self.violations[:50]
        )


def is_claim(event: Row) -> bool:
    """A unit claimed anew: from ready, or reclaimed from a lapsed lease (not a parking)."""
    return event["event_type"] in ("claimed", "stale_reclaimed") and event["to_state"] == "claimed"


def finishes(event: Row) -> bool:
    return event["event_type"] == "disposed" and (
        event["to_state"] == "done" or event["detail"].get("disposition") == "DROPPED"
    )


def parks(event: Row) -> bool:
    return event["event_type"] in ("released", "stale_reclaimed") and event["to_state"] == "waiting"


def acked_claims(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(first request, acknowledged one) of each claim that handed out a unit anew."""
    groups: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind in ("claim", "claim_named"):
            groups[op.first].append(op)
    claims, seen_attempts = [], set()
    for first_n in sorted(groups):
        group = sorted(groups[first_n], key=lambda o: o.n)
        acked = next((o for o in group if o.acked), None)
        if acked is None or not isinstance(acked.response, dict):
            continue
        attempt = acked.response.get("attempt")
        if attempt is None or acked.response.get("resumed") or attempt["id"] in seen_attempts:
            continue
        seen_attempts.add(attempt["id"])
        claims.append((group[0], acked))
    return claims


def claim_event_id(tables: Tables, acked: Op) -> int:
    attempt = acked.response["attempt"]["id"]
    for event in tables.events:
        if str(event["attempt_id"]) == attempt and is_claim(event):
            return int(event["id"])
    return 1 << 62
