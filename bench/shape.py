"""DESIGN §12's costs, measured in one run on one PostgreSQL (`bench.run --sections shape`).

    uv run python -m bench.shape [--units 1000000] [--claims 2000] [--rounds 3]

- pull-next p50 over a backlog of `--units` units with as many requirement edges (fan-ins
  onto 1,000 finished libraries, so every unit stays ready) against the same backlog
  without edges, in alternating windows;
- finishing (dispose MIGRATED) one unit with 1,000 waiting dependents against one with none;
- pull-next p50 with 1,000 budgets defined (one over the claimed fleet) against none;
- cost records from 64 agents into one budget scope: the spend kept in 16 shard rows (as
  migration 0011 does) against one row (the trigger redefined for the window).

Seeding writes the rows with triggers off (session_replication_role = replica, as a
restore does) and sets the counters the triggers would have set; everything measured runs
through the ledger's own statements with every trigger on.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg

from bench.harness import recreated, server_url
from work_ledger.db.connect import create_pool, ensure_database, with_database
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("bench-operator", privileged=True)
EVIDENCE = "https://ci.example/bench"

SEED_UNITS = """
INSERT INTO work_units (external_ref, fleet, domain, created_at, state)
SELECT 'u' || i, 'fleet-a', 'd' || (i % 8), clock_timestamp(), 'ready'
FROM generate_series(1, $1) AS i
"""
# Libraries, finished: what the edges point at, so the dependents stay ready.
SEED_LIBS = """
INSERT INTO work_units (external_ref, fleet, domain, state, disposition, disposed_at)
SELECT 'lib' || i, 'fleet-a', 'libs', 'done', 'MIGRATED', now()
FROM generate_series(1, $1) AS i
"""
# Each unit requires one of the 1,000 libraries (fan-ins of units / 1000 each): as many
# edges as units, every unit still ready.
SEED_EDGES = """
INSERT INTO unit_requirements (unit_id, prerequisite_id)
SELECT u.id, l.id
FROM (SELECT id, substr(external_ref, 2)::int AS n FROM work_units
      WHERE external_ref LIKE 'u%') AS u
JOIN work_units AS l ON l.external_ref = 'lib' || (1 + u.n % 1000)
"""


# 998 budgets of other fleets, and a fleet-wide and a domain budget over the claimed fleet.
SEED_BUDGETS = """
INSERT INTO budgets (fleet, domain, cap_cents)
SELECT 'other-' || i, NULL, 100 FROM generate_series(1, 998) AS i
UNION ALL VALUES ('fleet-a', NULL, 1000000000), ('fleet-a', 'd1', 1000000000)
"""


# The spend trigger of migration 0020 with `shards` rows per scope (16 there).
SPEND_SHARDS = """
CREATE OR REPLACE FUNCTION wl_add_scope_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scope_spend AS s (fleet, domain, shard, cents)
    VALUES (NEW.fleet, NEW.domain, pg_backend_pid() % {shards}, NEW.cost_cents - OLD.cost_cents)
    ON CONFLICT (fleet, domain, shard) DO UPDATE SET cents = s.cents + EXCLUDED.cents;
    INSERT INTO fleet_spend AS f (fleet, shard, cents)
    VALUES (NEW.fleet, pg_backend_pid() % {shards}, NEW.cost_cents - OLD.cost_cents)
    ON CONFLICT (fleet, shard) DO UPDATE SET cents = f.cents + EXCLUDED.cents;
    RETURN NULL;
END $$
"""


async def _seed(url: str, units: int, edges: bool) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(SEED_UNITS, units)
        if edges:
            await conn.execute(SEED_LIBS, 1000)
            await conn.execute(SEED_EDGES)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def _ledger(url: str) -> tuple[Ledger, asyncpg.Pool]:
    pool = await create_pool(url, min_size=1, max_size=2)
    return Ledger(Store(pool), lease_seconds=3600), pool


async def _claims(ledger: Ledger, tag: str, count: int) -> float:
    """Median seconds of `count` pull-next claims, each by a new agent."""
    times = []
    for i in range(count):
        start = time.perf_counter()
        claim = await ledger.claim(f"{tag}-{i}")
        times.append(time.perf_counter() - start)
        assert claim.unit is not None
    return statistics.median(times)


async def _finish_time(ledger: Ledger, tag: str, dependents: int) -> float:
    lib = f"{tag}-lib"
    units = [NewUnit(lib, "fleet-b", "fin")] + [
        NewUnit(f"{tag}-dep{i}", "fleet-b", "fin-deps", requires=(lib,)) for i in range(dependents)
    ]
    for batch in range(0, len(units), 1000):
        await ledger.register(units[batch : batch + 1000], OPERATOR)
    agent = Actor(f"{tag}-agent")
    await ledger.claim_named(lib, agent.name)
    await ledger.start(lib, agent)
    await ledger.verify(lib, agent, EVIDENCE)
    start = time.perf_counter()
    await ledger.dispose(lib, Disposition.MIGRATED, agent)
    return time.perf_counter() - start


async def main(units: int, claims: int, rounds: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-shape-"))
    atexit.register(shutil.rmtree, home, True)  # after the embedded server has stopped
    admin = server_url(home)
    urls = {}
    for name, edges in (("flat", False), ("edges", True)):
        urls[name] = await recreated(admin, f"bench_shape_{name}")
        await migrate_database(urls[name])
        started = time.perf_counter()
        await _seed(urls[name], units, edges)
        print(
            f"seeded {name}: {units} units, edges={edges} in {time.perf_counter() - started:.0f} s"
        )
    flat, flat_pool = await _ledger(urls["flat"])
    edged, edged_pool = await _ledger(urls["edges"])
    figures: dict[str, list[float]] = {"flat": [], "edges": []}
    for r in range(rounds):
        order = (
            [("flat", flat), ("edges", edged)] if r % 2 == 0 else [("edges", edged), ("flat", flat)]
        )
        for name, ledger in order:
            figures[name].append(await _claims(ledger, f"{name}-{r}", claims))
    flat_p50, edges_p50 = statistics.median(figures["flat"]), statistics.median(figures["edges"])
    print(
        f"pull-next p50: without edges {flat_p50 * 1e3:.3f} ms, with {units} edges "
        f"{edges_p50 * 1e3:.3f} ms, ratio {edges_p50 / flat_p50:.3f}"
    )

    fan = [await _finish_time(flat, f"fan{r}", 1000) for r in range(rounds)]
    alone = [await _finish_time(flat, f"alone{r}", 0) for r in range(rounds)]
    print(
        f"finishing a unit: with 1000 dependents {statistics.median(fan) * 1e3:.1f} ms, "
        f"with none {statistics.median(alone) * 1e3:.1f} ms"
    )

    conn = await asyncpg.connect(urls["flat"])
    budgets: dict[str, list[float]] = {"none": [], "1000": []}
    try:
        for r in range(rounds):
            for name in ("none", "1000") if r % 2 == 0 else ("1000", "none"):
                if name == "1000":
                    await conn.execute(SEED_BUDGETS)
                budgets[name].append(await _claims(flat, f"b{name}-{r}", claims))
                await conn.execute("DELETE FROM budgets")
    finally:
        await conn.close()
    none_p50, many_p50 = statistics.median(budgets["none"]), statistics.median(budgets["1000"])
    print(
        f"pull-next p50: {none_p50 * 1e3:.3f} ms without a budget over the fleet, "
        f"{many_p50 * 1e3:.3f} ms with 1000 budgets (2 over it), ratio {many_p50 / none_p50:.3f}"
    )
    await flat_pool.close()
    await edged_pool.close()
    await _hot_scope(admin, rounds)


async def _hot_scope(admin: str, rounds: int, agents: int = 64, records: int = 40) -> None:
    """Records per second from `agents` connections into one scope, 16 shards against 1."""
    await ensure_database(admin, "money")
    url = with_database(admin, "money")
    await migrate_database(url)
    pools = [await create_pool(url, min_size=1, max_size=1) for _ in range(agents)]
    ledgers = [Ledger(Store(p), lease_seconds=3600) for p in pools]
    await ledgers[0].register([NewUnit(f"m{i}", "fleet-m", "hot") for i in range(agents)], OPERATOR)
    await ledgers[0].set_budget("fleet-m", 10**12, OPERATOR, domain="hot")
    attempts = []
    for n, ledger in enumerate(ledgers):
        claim = await ledger.claim(f"m-agent-{n}")
        assert claim.attempt is not None
        attempts.append(claim.attempt.id)
    conn = await asyncpg.connect(url)
    rates: dict[int, list[float]] = {16: [], 1: []}

    async def spend(ledger: Ledger, attempt: object, n: int) -> None:
        for _ in range(records):
            await ledger.record_cost(attempt, 1, Actor(f"m-agent-{n}"))  # type: ignore[arg-type]

    try:
        for r in range(rounds):
            for shards in (16, 1) if r % 2 == 0 else (1, 16):
                await conn.execute(SPEND_SHARDS.replace("{shards}", str(shards)))
                start = time.perf_counter()
                await asyncio.gather(*(spend(ledgers[n], attempts[n], n) for n in range(agents)))
                rates[shards].append(agents * records / (time.perf_counter() - start))
    finally:
        await conn.execute(SPEND_SHARDS.replace("{shards}", "16"))
        await conn.close()
        for pool in pools:
            await pool.close()
    sharded, single = statistics.median(rates[16]), statistics.median(rates[1])
    print(
        f"cost records from {agents} agents into one scope: {sharded:.0f}/s with 16 spend "
        f"rows, {single:.0f}/s with one, ratio {sharded / single:.3f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.units, args.claims, args.rounds))
