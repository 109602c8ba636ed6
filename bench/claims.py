"""The claim configurations (raw-SQL limits, the ledger's SQL and service, PGQueuer) and the
diagnostics. Every worker has a connection of its own (the service: a pool as large as the
concurrency), so the configurations differ only in what they run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.harness import Operation
from work_ledger.db.connect import connect, create_pool
from work_ledger.db.queries import QUERIES, parse_named_sql
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition
from work_ledger.service.ledger import Ledger

# record_cost's model, four token counts and `estimated`, as Ledger sends a bare amount.
NO_COST_DETAIL = (None, None, None, None, None, False)
RAW = parse_named_sql((Path(__file__).parent / "raw.sql").read_text(encoding="utf-8"))
LEASE_SECONDS = 900
EVIDENCE = "https://ci.example.com/runs/1"
REPLENISH = "INSERT INTO work_units (external_ref, fleet) VALUES ($1, 'bench')"

Workers = Callable[[str, int], contextlib.AbstractAsyncContextManager[list[Operation]]]


@dataclass(frozen=True)
class Config:
    name: str
    template: str  # which template database it starts from: ledger, bare or pgqueuer
    backlog: int  # ready items seeded before each window (doubled if a window runs dry)
    seed: Callable[[asyncpg.Connection, int], Awaitable[None]]
    workers: Workers
    loop: str  # what one measured item includes
    db_setup: str = ""  # SQL run after seeding, before the workers connect


async def seed_bare(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(RAW["bare_create"])
    await conn.execute(RAW["bare_seed"], n)
    await conn.execute("VACUUM ANALYZE bench_items")


async def seed_ledger(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(RAW["ledger_seed"], n)  # one statement: refs are bench-1..n
    await conn.execute("VACUUM ANALYZE work_units")
    await conn.execute("VACUUM ANALYZE work_unit_events")


async def set_up(conn: asyncpg.Connection, sql: str) -> None:
    """A variant's change to a seeded ledger, vacuumed as the seed is (bench/README.md)."""
    await conn.execute(sql)
    await conn.execute("VACUUM ANALYZE work_units")


async def seed_pgqueuer(conn: asyncpg.Connection, n: int) -> None:
    from pgqueuer.queries import Queries

    queries = Queries.from_asyncpg_connection(conn)
    for start in range(0, n, 10_000):
        size = min(10_000, n - start)
        await queries.enqueue(["bench"] * size, [None] * size, [0] * size)
    await conn.execute("VACUUM ANALYZE pgqueuer")


@contextlib.asynccontextmanager
async def connections(url: str, n: int, *, plain: bool = False) -> AsyncIterator[list[Any]]:
    conns = []
    try:
        for _ in range(n):
            conns.append(await (asyncpg.connect(url) if plain else connect(url)))
        yield conns
    finally:
        for conn in conns:
            await conn.close()


@contextlib.asynccontextmanager
async def ledger_over_pool(url: str, c: int) -> AsyncIterator[Ledger]:
    pool = await create_pool(url, min_size=c, max_size=c)
    try:
        yield Ledger(Store(pool), lease_seconds=LEASE_SECONDS)
    finally:
        await pool.close()


def on_connections(make: Callable[[str, asyncpg.Connection], Operation]) -> Workers:
    """Workers each running `make(agent name, its own connection)`."""

    @contextlib.asynccontextmanager
    async def workers(url: str, c: int) -> AsyncIterator[list[Operation]]:
        async with connections(url, c) as conns:
            yield [make(_agent(i), conn) for i, conn in enumerate(conns)]

    return workers


def on_ledger(make: Callable[[str, Ledger], Operation]) -> Workers:
    """Workers each running `make(agent name, the service)` over one pool of c."""

    @contextlib.asynccontextmanager
    async def workers(url: str, c: int) -> AsyncIterator[list[Operation]]:
        async with ledger_over_pool(url, c) as ledger:
            yield [make(_agent(i), ledger) for i in range(c)]

    return workers


def _agent(i: int) -> str:
    return f"agent-{uuid.uuid4().hex[:6]}-{i}"  # several windows may share one database


def _fresh(agent: str) -> Callable[[], str]:
    """A fresh agent name per item: a claim-only loop never holds two units as one agent."""
    counter = itertools.count()
    return lambda: f"{agent}-{next(counter)}"


def bare_claim(agent: str, conn: asyncpg.Connection) -> Operation:
    async def op() -> float | None:
        t0 = time.perf_counter()
        row = await conn.fetchrow(RAW["bare_claim"], agent)
        return None if row is None else time.perf_counter() - t0

    return op


def sql_claim(*, finish: bool, product: bool) -> Callable[[str, asyncpg.Connection], Operation]:
    """The hand-written claim CTE, or (`product`) what Ledger.claim runs for a pull-next by
    an agent holding nothing; then, with `finish`, the hand-written start."""

    def make(agent: str, conn: asyncpg.Connection) -> Operation:
        names = _fresh(agent)

        async def op() -> float | None:
            name = names()
            t0 = time.perf_counter()
            if product:
                row = await conn.fetchrow(QUERIES["claim_next_unit"], name, None, LEASE_SECONDS)
            else:
                row = await conn.fetchrow(RAW["ledger_claim"], name, LEASE_SECONDS)
            latency = time.perf_counter() - t0
            if row is not None and finish:
                await conn.execute(RAW["ledger_finish"], row["unit_id"], row["attempt_id"], name)
            return None if row is None else latency

        return op

    return make


def service_claim(*, finish: bool) -> Callable[[str, Ledger], Operation]:
    def make(agent: str, ledger: Ledger) -> Operation:
        names = _fresh(agent)

        async def op() -> float | None:
            name = names()
            t0 = time.perf_counter()
            claim = await ledger.claim(name)
            latency = time.perf_counter() - t0
            if claim.unit is None or claim.attempt is None:
                return None
            if finish:
                await ledger.start(str(claim.unit.id), Actor(name), attempt_id=claim.attempt.id)
            return latency

        return op

    return make


def service_life(agent: str, ledger: Ledger, replenish: bool = False) -> Operation:
    """Claim, start, cost, verify, dispose MIGRATED; with `replenish`, one new unit after
    each (the backlog keeps its size)."""
    actor = Actor(agent)

    async def op() -> float | None:
        t0 = time.perf_counter()
        claim = await ledger.claim(actor.name)
        latency = time.perf_counter() - t0
        if claim.unit is None or claim.attempt is None:
            return None
        unit, attempt = str(claim.unit.id), claim.attempt.id
        await ledger.start(unit, actor, attempt_id=attempt)
        await ledger.record_cost(attempt, 125, actor)
        await ledger.verify(unit, actor, EVIDENCE, attempt_id=attempt)
        await ledger.dispose(unit, Disposition.MIGRATED, actor, attempt_id=attempt)
        if replenish:
            await ledger.store.pool.execute(REPLENISH, uuid.uuid4().hex)
        return latency

    return op


async def sql_life(conn: asyncpg.Connection, agent: str, evidence: str = EVIDENCE) -> float | None:
    """The statements of Ledger's life with its arguments on a raw connection; the claim's
    seconds, or None for nothing to claim. `evidence` may name the unit: {}."""
    t0 = time.perf_counter()
    row = await conn.fetchrow(QUERIES["claim_next_unit"], agent, None, LEASE_SECONDS)
    latency = time.perf_counter() - t0
    if row is None:
        return None
    unit, attempt = row["unit"]["id"], row["attempt"]["id"]
    await conn.fetchrow(QUERIES["start_unit"], unit, ["claimed"], agent, attempt, agent)
    await conn.fetchrow(QUERIES["record_cost"], attempt, 125, agent, agent, *NO_COST_DETAIL)
    verify = (unit, ["in_progress"], agent, attempt, evidence.format(unit), {}, agent)
    await conn.fetchrow(QUERIES["verify_unit"], *verify)
    await conn.fetchrow(QUERIES["dispose_verified_unit"], unit, agent, attempt, None, None, agent)
    return latency


def ledger_sql_life(agent: str, conn: asyncpg.Connection) -> Operation:
    return lambda: sql_life(conn, agent)


def raw_ledger_life(agent: str, conn: asyncpg.Connection) -> Operation:
    async def op() -> float | None:
        t0 = time.perf_counter()
        row = await conn.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
        latency = time.perf_counter() - t0
        if row is None:
            return None
        unit, attempt = row["unit_id"], row["attempt_id"]
        await conn.execute(RAW["ledger_finish"], unit, attempt, agent)
        await conn.execute(RAW["ledger_cost"], attempt, agent, 125)
        await conn.execute(RAW["ledger_verify"], unit, attempt, agent, EVIDENCE)
        await conn.execute(RAW["ledger_dispose"], unit, attempt, agent)
        return latency

    return op


@contextlib.asynccontextmanager
async def pgqueuer_manager(url: str, c: int) -> AsyncIterator[list[Operation]]:
    """PGQueuer the way its users run it: one QueueManager per worker connection,
    `run(batch_size=1)`, a no-op entrypoint; the manager logs completions its own way.
    It drives itself, so an operation waits for its manager's next finished job: its
    "latency" is the time between one manager's successive jobs."""
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries

    async with connections(url, c, plain=True) as conns:
        managers: list[QueueManager] = []
        finished: list[asyncio.Queue[float]] = []
        for conn in conns:
            manager = QueueManager(Queries.from_asyncpg_connection(conn))
            done: asyncio.Queue[float] = asyncio.Queue()

            async def noop(_job: Any, done: asyncio.Queue[float] = done) -> None:
                done.put_nowait(time.perf_counter())

            manager.entrypoint("bench")(noop)
            managers.append(manager)
            finished.append(done)
        timeout = dt.timedelta(seconds=1)
        runs = [asyncio.create_task(m.run(batch_size=1, dequeue_timeout=timeout)) for m in managers]

        def op_for(done: asyncio.Queue[float]) -> Operation:
            async def op() -> float | None:
                t0 = time.perf_counter()
                try:
                    await asyncio.wait_for(done.get(), 2.0)
                except TimeoutError:
                    return None  # the queue ran dry
                return time.perf_counter() - t0

            return op

        try:
            yield [op_for(done) for done in finished]
        finally:
            for manager in managers:
                manager.shutdown.set()
            await asyncio.wait(runs, timeout=10)
            for run in runs:
                run.cancel()


SQL, SERVICE = "a raw connection, no service layer", "Ledger over a Store/pool of c"
HAND = "the hand-written claim CTE on the real schema (unit update + attempt and event rows)"
CONFIGS = [
    Config("raw_bare_claim", "bare", 120_000, seed_bare, on_connections(bare_claim),
           "1 commit: UPDATE … WHERE id = (SELECT … FOR NO KEY UPDATE SKIP LOCKED LIMIT 1) on a "
           "bare table (no attempt or event rows, no triggers)"),
    Config("raw_ledger_claim", "ledger", 40_000, seed_ledger,
           on_connections(sql_claim(finish=False, product=False)), f"1 commit: {HAND}"),
    Config("ledger_sql_claim", "ledger", 30_000, seed_ledger,
           on_connections(sql_claim(finish=False, product=True)),
           f"1 commit: the product's pull-next (claim_next_unit), an agent holding nothing, {SQL}"),
    Config("service_claim", "ledger", 30_000, seed_ledger, on_ledger(service_claim(finish=False)),
           f"1 commit: Ledger.claim ({SERVICE}), records decoded into domain objects"),
    Config("raw_ledger_claim_finish", "ledger", 20_000, seed_ledger,
           on_connections(sql_claim(finish=True, product=False)),
           f"2 commits: {HAND}, then a hand-written start (claimed → in_progress + event)"),
    Config("service_claim_finish", "ledger", 20_000, seed_ledger,
           on_ledger(service_claim(finish=True)),
           f"2 commits: Ledger.claim, then Ledger.start fenced by attempt_id ({SERVICE})"),
    Config("service_life", "ledger", 10_000, seed_ledger, on_ledger(service_life),
           f"5 commits: Ledger.claim, start, record_cost, verify, dispose MIGRATED ({SERVICE})"),
    Config("ledger_sql_life", "ledger", 10_000, seed_ledger, on_connections(ledger_sql_life),
           f"5 commits: the statements of service_life with its arguments, {SQL}"),
    Config("raw_ledger_life", "ledger", 10_000, seed_ledger, on_connections(raw_ledger_life),
           f"5 commits: {HAND}, then hand-written start, cost, verify and dispose (with events)"),
    Config("pgqueuer_manager", "pgqueuer", 15_000, seed_pgqueuer, pgqueuer_manager,
           "PGQueuer 1.6 as its users run it: QueueManager.run(batch_size=1), one manager per "
           "worker connection, a no-op entrypoint"),
]  # fmt: skip


def variant(base: str, name: str, note: str, db_setup: str) -> Config:
    """Configuration `base` on a database that `db_setup` changed after seeding."""
    config = next(c for c in CONFIGS if c.name == base)
    return dataclasses.replace(config, name=name, loop=f"{config.loop}; {note}", db_setup=db_setup)


# Pull-next with flow controls that stop none of the backlog, paused units ahead of it.
CONTROLS = (
    "with flow controls (raw.sql ledger_controls_seed): a key on each claimed unit, 200 "
    "other fleets capped, every other one paused, 1,000 paused units ahead in the queue"
)
CONFIGS.append(variant("ledger_sql_claim", "ledger_sql_claim_controls", CONTROLS,
                       RAW["ledger_controls_seed"]))  # fmt: skip
# Issue 38's goal as worded: the keys, too, on other scopes; the claimed units carry none.
ELSEWHERE = ";\n".join(RAW[n] for n in ("ledger_controls_seed", "controls_keys_elsewhere"))
CONFIGS.append(variant("ledger_sql_claim", "ledger_sql_claim_controls_elsewhere", CONTROLS.replace(
    "a key on each claimed unit", "100 keys held in other fleets, none on the claimed units"),
    ELSEWHERE))  # fmt: skip

# The diagnostics: where the claim's cost goes. ALTER DATABASE applies to the workers'
# connections, which open after it runs.
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
NO_GUARD = "ALTER TABLE work_units DISABLE TRIGGER unit_state_transition_allowed;"
CUSTOM = "plan_cache_mode = force_custom_plan (never the cached generic plan)"
DIAGNOSTICS = [
    variant("ledger_sql_claim", "ledger_sql_claim_custom_plans", CUSTOM, CUSTOM_PLANS),
    variant("service_claim", "service_claim_custom_plans", CUSTOM, CUSTOM_PLANS),
    variant("raw_ledger_claim", "raw_ledger_claim_no_sum_triggers",
            "the three deferred unit_sums_* constraint triggers disabled", NO_SUM_TRIGGERS),
    variant("raw_ledger_claim", "raw_ledger_claim_no_user_triggers", "the sum triggers and the "
            "unit_state_transition_allowed guard disabled (foreign keys still checked)",
            NO_SUM_TRIGGERS + NO_GUARD),
]  # fmt: skip


async def explain_claim(conn: asyncpg.Connection) -> dict[str, list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the product's claim under its generic and custom plan."""
    plans = {}
    for mode in ("force_custom_plan", "force_generic_plan"):
        await conn.execute(f"SET plan_cache_mode = {mode}")
        await conn.execute("DEALLOCATE ALL")
        await conn.execute("PREPARE claim(text, text, integer, uuid) AS " + QUERIES["claim_unit"])
        call = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim('{mode}', NULL, 900, NULL)"
        plans[mode] = [r[0] for r in await conn.fetch(call)]
    await conn.execute("DEALLOCATE ALL")
    await conn.execute("RESET plan_cache_mode")
    return plans
