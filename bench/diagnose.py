"""Why a claim costs what it costs: the claim under forced custom plans and with triggers
off (`DIAGNOSTICS`, measured as the claim configurations are), and the plans PostgreSQL
runs for it, in a throwaway database.

The product's statements reach PostgreSQL as asyncpg prepared statements. After five
executions PostgreSQL may switch a prepared statement to its cached *generic* plan (planned
without the parameter values); `pg_prepared_statements` says which it used. This module
shows both plans of the product's claim next to the hand-written one.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from bench.claims import LEASE_SECONDS, RAW, seed_ledger, variant
from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES

BACKLOG = 30_000
CLAIMS_BEFORE = 500  # claimed units ahead in the ready index, as in a running queue


# Applies to the workers' connections, which open after this runs.
CUSTOM_PLANS = """
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET plan_cache_mode = force_custom_plan', current_database());
END $$;
"""
NO_SUM_TRIGGERS = """
ALTER TABLE work_units DISABLE TRIGGER unit_sums_on_unit;
ALTER TABLE work_unit_attempts DISABLE TRIGGER unit_sums_on_attempt_insert;
ALTER TABLE work_unit_attempts DISABLE TRIGGER unit_sums_on_attempt_cost;
"""
NO_GUARD_TRIGGER = "ALTER TABLE work_units DISABLE TRIGGER unit_state_transition_allowed;"

# Throwaway-database variants that locate the cost of the ledger's claim.
DIAGNOSTICS = [
    variant(
        "ledger_sql_claim",
        "ledger_sql_claim_custom_plans",
        "plan_cache_mode = force_custom_plan (never the cached generic plan)",
        CUSTOM_PLANS,
    ),
    variant(
        "service_claim",
        "service_claim_custom_plans",
        "plan_cache_mode = force_custom_plan",
        CUSTOM_PLANS,
    ),
    variant(
        "raw_ledger_claim",
        "raw_ledger_claim_no_sum_triggers",
        "the three deferred unit_sums_* constraint triggers disabled",
        NO_SUM_TRIGGERS,
    ),
    variant(
        "raw_ledger_claim",
        "raw_ledger_claim_no_user_triggers",
        "the deferred sum triggers and the unit_state_transition_allowed guard disabled "
        "(foreign keys still checked)",
        NO_SUM_TRIGGERS + NO_GUARD_TRIGGER,
    ),
]


async def _explain(conn: asyncpg.Connection, statement: str, call: str, mode: str) -> list[str]:
    await conn.execute(f"SET plan_cache_mode = {mode}")
    await conn.execute("DEALLOCATE ALL")
    await conn.execute(statement)
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {call}")
    await conn.execute("DEALLOCATE ALL")
    await conn.execute("RESET plan_cache_mode")
    return [r[0] for r in rows]


def _figure(plan: list[str], prefix: str) -> str | None:
    return next((line.strip() for line in plan if line.strip().startswith(prefix)), None)


async def claim_plans(server: Any, template: str, backlog: int = BACKLOG) -> dict[str, Any]:
    out: dict[str, Any] = {"backlog": backlog, "claimed_before": CLAIMS_BEFORE}
    async with server.fresh_database("plans", template) as url:
        conn = await connect(url)
        try:
            await seed_ledger(conn, backlog)
            # Claim through asyncpg's own prepared statement, as the service does, then ask
            # PostgreSQL which plans it used for it.
            for i in range(CLAIMS_BEFORE):
                await conn.fetchrow(QUERIES["claim_unit"], f"warm-{i}", None, LEASE_SECONDS, None)
            out["asyncpg_prepared_claim_unit"] = [
                dict(r)
                for r in await conn.fetch(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%fresh_in_domain%' "
                    "AND statement NOT LIKE '%pg_prepared_statements%'"
                )
            ]
            product = (
                "PREPARE claim(text, text, integer, uuid) AS " + QUERIES["claim_unit"],
                "EXECUTE claim('explain-{mode}', NULL, 900, NULL)",
            )
            raw = (
                "PREPARE claim(text, integer) AS " + RAW["ledger_claim"],
                "EXECUTE claim('explain-raw-{mode}', 900)",
            )
            for label, (prepare, call) in (("claim_unit", product), ("raw_ledger_claim", raw)):
                for mode in ("force_generic_plan", "force_custom_plan"):
                    plan = await _explain(conn, prepare, call.format(mode=mode), mode)
                    out[f"{label}:{mode}"] = {
                        "execution": _figure(plan, "Execution Time"),
                        "buffers": _figure(plan, "Buffers"),
                        "plan": plan,
                    }
            out["trigger_times"] = await _trigger_times(conn)
        finally:
            await conn.close()
    return out


async def _trigger_times(conn: asyncpg.Connection) -> dict[str, list[str]]:
    """Per-trigger time of one claim, deferred triggers included.

    The unit_sums_* constraint triggers are deferred to commit, where EXPLAIN cannot see
    them; with SET CONSTRAINTS ALL IMMEDIATE they fire at the end of the statement and
    EXPLAIN ANALYZE reports each. The transaction is rolled back.
    """
    out = {}
    calls = {
        "raw_ledger_claim": (RAW["ledger_claim"], ("explain-trg-raw", LEASE_SECONDS)),
        "claim_unit": (QUERIES["claim_unit"], ("explain-trg-product", None, LEASE_SECONDS, None)),
    }
    for label, (statement, args) in calls.items():
        tr = conn.transaction()
        await tr.start()
        try:
            await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {statement}", *args)
            out[label] = [
                r[0].strip()
                for r in rows
                if r[0].startswith("Trigger") or r[0].startswith("Execution Time")
            ]
        finally:
            await tr.rollback()
    return out


def filtered_scans(plan: list[str]) -> list[str]:
    """The plan lines around each node that read rows only to throw them away."""
    found = []
    for i, line in enumerate(plan):
        if "Rows Removed by Filter" in line:
            found += [x.strip() for x in plan[max(0, i - 2) : i + 1]]
    return found


def markdown(plans: dict[str, Any]) -> list[str]:
    lines = [
        "EXPLAIN (ANALYZE, BUFFERS) of one pull-next claim with "
        f"{plans['backlog']:,} ready units, {plans['claimed_before']} already claimed:",
        "",
        "| statement | plan | planning | execution | top-level buffers |",
        "|---|---|---|---|---|",
    ]
    for key, value in plans.items():
        if ":" in key:
            label, mode = key.split(":")
            planning = _figure(value["plan"], "Planning Time")
            lines.append(
                f"| {label} | {mode} | {planning} | {value['execution']} | {value['buffers']} |"
            )
    lines += [
        "",
        "asyncpg's prepared `claim_unit` after "
        f"{plans['claimed_before']} executions: {plans['asyncpg_prepared_claim_unit']}.",
    ]
    for label, lines_ in plans.get("trigger_times", {}).items():
        lines += ["", f"Triggers of one `{label}` (constraints immediate, rolled back):", "```"]
        lines += [*lines_, "```"]
    generic = plans.get("claim_unit:force_generic_plan", {}).get("plan", [])
    if filtered_scans(generic):
        lines += ["", "Nodes of the generic claim_unit plan that discard rows:", "", "```"]
        lines += [*filtered_scans(generic), "```"]
    return lines
