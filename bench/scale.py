"""Scale: does the claim stay flat as the backlog grows, and does the event log page by keyset?

- Claim latency with a small and a large ready backlog (1,000 and 1,000,000 by default).
  Each measured claim is followed, outside its timing, by the unit's start, verify and
  dispose (so each worker's agent holds one live lease, as in a fleet) and by the
  registration of one new ready unit (so the backlog keeps its size for the whole window).
- The EXPLAIN (ANALYZE) of the claim on the large backlog: which index it walks.
- The event log at 10,000,000 rows: the keyset page (list_events) at the newest and at
  the oldest end, timed through the service (Ledger.list_events).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import asyncpg

from bench.claims import (
    EVIDENCE,
    LEASE_SECONDS,
    RAW,
    connections,
    ledger_over_pool,
)
from bench.harness import Operation, Server, measure, median_of, percentile
from work_ledger.db.connect import connect, create_pool
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition
from work_ledger.service.ledger import Ledger

REPLENISH = "INSERT INTO work_units (external_ref, fleet) VALUES ($1, 'bench')"
PAGE = 100


async def _seed_units(url: str, n: int) -> float:
    conn = await connect(url)
    try:
        t0 = time.perf_counter()
        await conn.execute(RAW["ledger_seed"], n)  # one statement: refs are bench-1..n
        await conn.execute("VACUUM ANALYZE work_units")
        await conn.execute("VACUUM ANALYZE work_unit_events")
        return time.perf_counter() - t0
    finally:
        await conn.close()


async def _claim_window(
    server: Server, url: str, path: str, c: int, warmup: float, duration: float
) -> dict[str, Any]:
    """Timed claims; each followed, untimed, by the unit's retirement and one new unit."""
    async with ledger_over_pool(url, c) as ledger, connections(url, c) as conns:

        def op_for(i: int) -> Operation:
            actor = Actor(f"agent-{uuid.uuid4().hex[:6]}-{i}")
            conn = conns[i]

            async def op() -> float | None:
                t0 = time.perf_counter()
                if path == "service":
                    claim = await ledger.claim(actor.name)
                    latency = time.perf_counter() - t0
                    if claim.unit is None or claim.attempt is None:
                        return None
                    unit, attempt = claim.unit.id, claim.attempt.id
                else:
                    row = await conn.fetchrow(RAW["ledger_claim"], actor.name, LEASE_SECONDS)
                    latency = time.perf_counter() - t0
                    if row is None:
                        return None
                    unit, attempt = row["unit_id"], row["attempt_id"]
                # Untimed: retire the unit (live leases stay at one per worker, as in a
                # fleet) and register one new unit (the backlog keeps its size).
                await ledger.start(str(unit), actor, attempt_id=attempt)
                await ledger.verify(str(unit), actor, EVIDENCE, attempt_id=attempt)
                await ledger.dispose(str(unit), Disposition.MIGRATED, actor, attempt_id=attempt)
                await conn.execute(REPLENISH, f"refill-{uuid.uuid4().hex}")
                return latency

            return op

        sample = await measure(
            [op_for(i) for i in range(c)], server=server, warmup=warmup, duration=duration
        )
    return sample.summary()


async def claim_by_backlog(
    server: Server, template: str, sizes: dict[str, int], args: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": sizes, "runs": {}}
    for label, size in sizes.items():
        async with server.fresh_database(f"scale_{label}", template) as url:
            out[f"seed_seconds_{label}"] = round(await _seed_units(url, size), 1)
            runs: dict[str, list[dict[str, Any]]] = {}
            for rep in range(args.reps):
                paths = ["service", "raw_ledger"]
                for path in paths:
                    for c in (1, 16):
                        s = await _claim_window(server, url, path, c, args.warmup, args.duration)
                        runs.setdefault(f"{path}:c={c}", []).append(s)
                        print(
                            f"scale {label} ({size:,} ready) rep {rep + 1} {path} c={c}: "
                            f"p50 {s['claim_p50_ms']:.2f} p99 {s['claim_p99_ms']:.2f} ms "
                            f"{s['items_per_s']:.0f}/s",
                            flush=True,
                        )
            out["runs"][label] = runs
            out[label] = median_of(runs["service:c=1"])
            out[f"{label}_by_path"] = {k: median_of(v) for k, v in runs.items()}
            if label == "large":
                out["explain_large"] = await _explain_claim(url)
    return out


async def _explain_claim(url: str) -> dict[str, list[str]]:
    conn = await connect(url)
    plans = {}
    try:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            await conn.execute("DEALLOCATE ALL")
            await conn.execute(
                "PREPARE claim(text, text, integer, uuid) AS " + QUERIES["claim_unit"]
            )
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                f"EXECUTE claim('explain-{mode}', NULL, 900, NULL)"
            )
            plans[f"claim_unit:{mode}"] = [r[0] for r in rows]
    finally:
        await conn.close()
    return plans


EVENTS_SEED = """
INSERT INTO work_unit_events (unit_id, event_type, agent_id, detail, created_at)
SELECT units.ids[1 + (g % array_length(units.ids, 1))], 'heartbeat', 'bench', '{}',
       timestamptz '2025-01-01' + g * interval '1 millisecond'
FROM (SELECT array_agg(id) AS ids FROM work_units) AS units,
     generate_series($1::bigint, $2::bigint) AS g
"""


async def _seed_events(url: str, n: int) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        t0 = time.perf_counter()
        await conn.execute(RAW["ledger_seed"], 1000)
        # Seeding only: skip the per-row foreign-key triggers (superuser; this session).
        await conn.execute("SET session_replication_role = replica")
        await conn.execute("SET maintenance_work_mem = '256MB'")
        # Secondary indexes are built once after the load (same definitions, read back).
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'work_unit_events' "
            "AND indexname IN ('work_unit_events_keyset_idx', 'work_unit_events_unit_idx')"
        )
        for index in indexes:
            await conn.execute(f'DROP INDEX "{index["indexname"]}"')
        step = 1_000_000
        for start in range(1, n + 1, step):
            await conn.execute(EVENTS_SEED, start, min(n, start + step - 1))
        for index in indexes:
            await conn.execute(index["indexdef"])
        await conn.execute("SET session_replication_role = DEFAULT")
        await conn.execute("VACUUM ANALYZE work_unit_events")
        seconds = time.perf_counter() - t0
        rows = await conn.fetchval("SELECT count(*) FROM work_unit_events")
        size = await conn.fetchval(
            "SELECT pg_size_pretty(pg_total_relation_size('work_unit_events'))"
        )
        return {"rows": rows, "seed_seconds": round(seconds, 1), "total_size": size}
    finally:
        await conn.close()


async def event_pages(server: Server, template: str, n: int, reps: int) -> dict[str, Any]:
    async with server.fresh_database("events", template) as url:
        out = await _seed_events(url, n)
        pool = await create_pool(url, min_size=1, max_size=1)
        try:
            ledger = Ledger(Store(pool))
            conn = await asyncpg.connect(url)
            try:
                # The cursor whose page is the oldest PAGE events.
                oldest_cursor = await conn.fetchval(
                    "SELECT id FROM work_unit_events ORDER BY created_at, id OFFSET $1 LIMIT 1",
                    PAGE,
                )
                out["explain"] = {}
                for label, cursor in (("newest", None), ("oldest", oldest_cursor)):
                    rows = await conn.fetch(
                        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                        + QUERIES["list_events"]
                        .replace("$1", "NULL::uuid")
                        .replace("$2", "NULL::bigint" if cursor is None else f"{cursor}::bigint")
                        .replace("$3", str(PAGE))
                    )
                    out["explain"][label] = [r[0] for r in rows]
            finally:
                await conn.close()
            for label, cursor in (("newest", None), ("oldest", oldest_cursor)):
                latencies = []
                for _ in range(max(3, reps) * 100):
                    t0 = time.perf_counter()
                    page = await ledger.list_events(
                        limit=PAGE, cursor=None if cursor is None else str(cursor)
                    )
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert len(page.items) == PAGE
                out[f"{label}_page"] = {
                    "pages": len(latencies),
                    "p50_ms": percentile(latencies, 50),
                    "p99_ms": percentile(latencies, 99),
                }
                print(f"events {n:,}: {label} page {out[f'{label}_page']}", flush=True)
        finally:
            await pool.close()
    return out


def markdown(scale: dict[str, Any]) -> list[str]:
    lines = ["## Scale", ""]
    claim = scale.get("claim")
    if claim:
        lines += [
            "Claim latency by ready backlog (each claim followed, untimed, by the unit's "
            "start, verify and dispose and by one new registration, so the backlog keeps "
            "its size and each worker holds one live lease):",
            "",
            "| backlog | path | c | claim p50 ms | claim p99 ms | items/s (incl. untimed work) |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for label, size in claim["sizes"].items():
            for key, m in claim[f"{label}_by_path"].items():
                path, c = key.split(":c=")
                lines.append(
                    f"| {size:,} | {path} | {c} | {m['claim_p50_ms']:.2f} "
                    f"| {m['claim_p99_ms']:.2f} | {m['items_per_s']:,.0f} |"
                )
        lines += [
            "",
            f"Seeding took {claim.get('seed_seconds_small')} s (small) and "
            f"{claim.get('seed_seconds_large')} s (large).",
        ]
        for mode, plan in claim.get("explain_large", {}).items():
            lines += ["", f"EXPLAIN (ANALYZE, BUFFERS) `{mode}`, large backlog (excerpt):", "```"]
            lines += [
                x
                for x in plan
                if "Index Scan" in x
                or "Rows Removed" in x
                or "Execution Time" in x
                or "Planning Time" in x
            ]
            lines.append("```")
    events = scale.get("events")
    if events:
        lines += [
            "",
            f"Event log: {events['rows']:,} rows ({events['total_size']} with indexes; "
            f"seeded in {events['seed_seconds']} s). Keyset page of {PAGE} through "
            "Ledger.list_events:",
            "",
            "| page | pages timed | p50 ms | p99 ms |",
            "|---|---:|---:|---:|",
        ]
        for label in ("newest", "oldest"):
            p = events[f"{label}_page"]
            lines.append(f"| {label} | {p['pages']} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f} |")
        for label, plan in events.get("explain", {}).items():
            lines += ["", f"EXPLAIN (ANALYZE) of the {label} page (excerpt):", "```"]
            lines += [x for x in plan if "Index" in x or "Time" in x or "Rows Removed" in x]
            lines.append("```")
    return lines
