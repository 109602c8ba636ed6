"""The claim configurations: raw-SQL limits, the ledger's SQL and service, and PGQueuer.

Each configuration seeds a fresh database with a backlog and yields one operation per
worker. An operation does one item of work (the loop named in `loop`) and returns how long
its claim took. Every worker has a connection of its own (the service: a pool as large as
the concurrency), so the configurations differ only in what they run.
"""

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

Workers = Callable[[str, int], contextlib.AbstractAsyncContextManager[list[Operation]]]


@dataclass(frozen=True)
class Config:
    name: str
    template: str  # which template database it starts from: ledger, bare or pgqueuer
    backlog: int  # ready items seeded before each window (doubled if a window runs dry)
    seed: Callable[[asyncpg.Connection, int], Awaitable[None]]
    workers: Workers
    loop: str  # what one measured item includes
    db_setup: str = ""  # SQL run after seeding, before the workers connect (diagnostics)


async def seed_bare(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(RAW["bare_create"])
    await conn.execute(RAW["bare_seed"], n)
    await conn.execute("VACUUM ANALYZE bench_items")


async def seed_ledger(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(RAW["ledger_seed"], n)
    await conn.execute("VACUUM ANALYZE work_units")
    await conn.execute("VACUUM ANALYZE work_unit_events")


async def seed_pgqueuer(conn: asyncpg.Connection, n: int) -> None:
    from pgqueuer.queries import Queries

    queries = Queries.from_asyncpg_connection(conn)
    step = 10_000
    for start in range(0, n, step):
        size = min(step, n - start)
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


def _clock() -> float:
    return time.perf_counter()


# -- raw SQL ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def bare_claim(url: str, c: int) -> AsyncIterator[list[Operation]]:
    async with connections(url, c) as conns:

        def op_for(i: int, conn: asyncpg.Connection) -> Operation:
            async def op() -> float | None:
                t0 = _clock()
                row = await conn.fetchrow(RAW["bare_claim"], f"worker-{i}")
                return None if row is None else _clock() - t0

            return op

        yield [op_for(i, conn) for i, conn in enumerate(conns)]


def _agents(i: int) -> Callable[[], str]:
    """A fresh agent name per item: a claim-only loop never holds two units as one agent."""
    counter = itertools.count()
    run = uuid.uuid4().hex[:6]  # several windows may share one database (scale)
    return lambda: f"agent-{run}-{i}-{next(counter)}"


def _raw_ledger(*, finish: bool, product_sql: bool = False) -> Workers:
    @contextlib.asynccontextmanager
    async def workers(url: str, c: int) -> AsyncIterator[list[Operation]]:
        async with connections(url, c) as conns:

            def op_for(i: int, conn: asyncpg.Connection) -> Operation:
                agent_name = _agents(i)

                async def op() -> float | None:
                    agent = agent_name()
                    t0 = _clock()
                    if product_sql:
                        # What Ledger.claim runs for a pull-next by an agent holding nothing.
                        statement = QUERIES["claim_next_unit"]
                        row = await conn.fetchrow(statement, agent, None, LEASE_SECONDS)
                    else:
                        row = await conn.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
                    latency = _clock() - t0
                    if row is None:
                        return None
                    if finish:
                        unit_id, attempt_id = row["unit_id"], row["attempt_id"]
                        await conn.execute(RAW["ledger_finish"], unit_id, attempt_id, agent)
                    return latency

                return op

            yield [op_for(i, conn) for i, conn in enumerate(conns)]

    return workers


# -- the service layer --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def ledger_over_pool(url: str, c: int) -> AsyncIterator[Ledger]:
    pool = await create_pool(url, min_size=c, max_size=c)
    try:
        yield Ledger(Store(pool), lease_seconds=LEASE_SECONDS)
    finally:
        await pool.close()


def _service(*, finish: bool) -> Workers:
    @contextlib.asynccontextmanager
    async def workers(url: str, c: int) -> AsyncIterator[list[Operation]]:
        async with ledger_over_pool(url, c) as ledger:

            def op_for(i: int) -> Operation:
                agent_name = _agents(i)

                async def op() -> float | None:
                    agent = agent_name()
                    t0 = _clock()
                    claim = await ledger.claim(agent)
                    latency = _clock() - t0
                    if claim.unit is None or claim.attempt is None:
                        return None
                    if finish:
                        await ledger.start(
                            str(claim.unit.id), Actor(agent), attempt_id=claim.attempt.id
                        )
                    return latency

                return op

            yield [op_for(i) for i in range(c)]

    return workers


@contextlib.asynccontextmanager
async def service_life(url: str, c: int) -> AsyncIterator[list[Operation]]:
    async with ledger_over_pool(url, c) as ledger:

        def op_for(i: int) -> Operation:
            actor = Actor(f"agent-{uuid.uuid4().hex[:6]}-{i}")

            async def op() -> float | None:
                t0 = _clock()
                claim = await ledger.claim(actor.name)
                latency = _clock() - t0
                if claim.unit is None or claim.attempt is None:
                    return None
                unit, attempt = str(claim.unit.id), claim.attempt.id
                await ledger.start(unit, actor, attempt_id=attempt)
                await ledger.record_cost(attempt, 125, actor)
                await ledger.verify(unit, actor, EVIDENCE, attempt_id=attempt)
                await ledger.dispose(unit, Disposition.MIGRATED, actor, attempt_id=attempt)
                return latency

            return op

        yield [op_for(i) for i in range(c)]


@contextlib.asynccontextmanager
async def ledger_sql_life(url: str, c: int) -> AsyncIterator[list[Operation]]:
    """The statements Ledger's life runs, with its arguments, on raw connections."""
    async with connections(url, c) as conns:

        def op_for(i: int, conn: asyncpg.Connection) -> Operation:
            agent = f"agent-{uuid.uuid4().hex[:6]}-{i}"

            async def op() -> float | None:
                t0 = _clock()
                row = await conn.fetchrow(QUERIES["claim_next_unit"], agent, None, LEASE_SECONDS)
                latency = _clock() - t0
                if row is None:
                    return None
                unit, attempt = row["unit"]["id"], row["attempt"]["id"]
                await conn.fetchrow(QUERIES["start_unit"], unit, ["claimed"], agent, attempt, agent)
                cost = (attempt, 125, agent, agent, *NO_COST_DETAIL)
                await conn.fetchrow(QUERIES["record_cost"], *cost)
                verify = (unit, ["in_progress"], agent, attempt, EVIDENCE, {}, agent)
                await conn.fetchrow(QUERIES["verify_unit"], *verify)
                dispose = (unit, agent, attempt, None, None, agent)
                await conn.fetchrow(QUERIES["dispose_verified_unit"], *dispose)
                return latency

            return op

        yield [op_for(i, conn) for i, conn in enumerate(conns)]


@contextlib.asynccontextmanager
async def raw_ledger_life(url: str, c: int) -> AsyncIterator[list[Operation]]:
    async with connections(url, c) as conns:

        def op_for(i: int, conn: asyncpg.Connection) -> Operation:
            agent = f"agent-{uuid.uuid4().hex[:6]}-{i}"

            async def op() -> float | None:
                t0 = _clock()
                row = await conn.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
                latency = _clock() - t0
                if row is None:
                    return None
                unit, attempt = row["unit_id"], row["attempt_id"]
                await conn.execute(RAW["ledger_finish"], unit, attempt, agent)
                await conn.execute(RAW["ledger_cost"], attempt, agent, 125)
                await conn.execute(RAW["ledger_verify"], unit, attempt, agent, EVIDENCE)
                await conn.execute(RAW["ledger_dispose"], unit, attempt, agent)
                return latency

            return op

        yield [op_for(i, conn) for i, conn in enumerate(conns)]


# -- the peer -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def pgqueuer_dequeue_complete(url: str, c: int) -> AsyncIterator[list[Operation]]:
    from pgqueuer.ports.repository import EntrypointExecutionParameter
    from pgqueuer.queries import Queries

    entrypoints = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}
    heartbeat_timeout = dt.timedelta(seconds=30)
    async with connections(url, c, plain=True) as conns:

        def op_for(conn: asyncpg.Connection) -> Operation:
            queries = Queries.from_asyncpg_connection(conn)
            manager_id = uuid.uuid4()

            async def op() -> float | None:
                t0 = _clock()
                jobs = await queries.dequeue(
                    batch_size=1,
                    entrypoints=entrypoints,  # type: ignore[arg-type]
                    queue_manager_id=manager_id,  # type: ignore[arg-type]
                    global_concurrency_limit=None,
                    heartbeat_timeout=heartbeat_timeout,
                )
                latency = _clock() - t0
                if not jobs:
                    return None
                await queries.log_jobs([(jobs[0], "successful", None)])
                return latency

            return op

        yield [op_for(conn) for conn in conns]


@contextlib.asynccontextmanager
async def pgqueuer_manager(url: str, c: int) -> AsyncIterator[list[Operation]]:
    """PGQueuer the way its users run it: one QueueManager per worker connection,
    `run(batch_size=1)`, a no-op entrypoint; the manager logs completions its own way.

    The manager drives itself, so each operation waits for its manager's next finished
    job; its "latency" is the time between one manager's successive jobs."""
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries

    async with connections(url, c, plain=True) as conns:
        managers: list[QueueManager] = []
        finished: list[asyncio.Queue[float]] = []
        for conn in conns:
            manager = QueueManager(Queries.from_asyncpg_connection(conn))
            done: asyncio.Queue[float] = asyncio.Queue()

            async def noop(_job: Any, done: asyncio.Queue[float] = done) -> None:
                done.put_nowait(_clock())

            manager.entrypoint("bench")(noop)
            managers.append(manager)
            finished.append(done)
        runs = [
            asyncio.create_task(m.run(batch_size=1, dequeue_timeout=dt.timedelta(seconds=1)))
            for m in managers
        ]

        def op_for(done: asyncio.Queue[float]) -> Operation:
            async def op() -> float | None:
                t0 = _clock()
                try:
                    await asyncio.wait_for(done.get(), 2.0)
                except TimeoutError:
                    return None  # the queue ran dry
                return _clock() - t0

            return op

        try:
            yield [op_for(done) for done in finished]
        finally:
            for manager in managers:
                manager.shutdown.set()
            await asyncio.wait(runs, timeout=10)
            for run in runs:
                run.cancel()


CONFIGS = [
    Config("raw_bare_claim", "bare", 120_000, seed_bare, bare_claim,
           "1 statement, 1 commit: UPDATE … WHERE id = (SELECT … FOR NO KEY UPDATE SKIP LOCKED "
           "LIMIT 1) on a bare table (no attempt/event rows, no triggers)"),
    Config("raw_ledger_claim", "ledger", 40_000, seed_ledger, _raw_ledger(finish=False),
           "1 statement, 1 commit: hand-written claim CTE on the real schema (unit update + "
           "attempt row + event row; triggers fire)"),
    Config("ledger_sql_claim", "ledger", 30_000, seed_ledger,
           _raw_ledger(finish=False, product_sql=True),
           "1 statement, 1 commit: the product's pull-next SQL as Ledger.claim runs it for an "
           "agent holding nothing (claim_next_unit, db/sql/units.sql) on a raw connection, no "
           "service layer"),
    Config("service_claim", "ledger", 30_000, seed_ledger, _service(finish=False),
           "1 statement, 1 commit: Ledger.claim over a Store/pool (pool size = concurrency), "
           "records decoded into domain objects"),
    Config("raw_ledger_claim_finish", "ledger", 20_000, seed_ledger, _raw_ledger(finish=True),
           "2 commits: the hand-written claim CTE, then a finish commit (claimed → in_progress "
           "+ event)"),
    Config("service_claim_finish", "ledger", 20_000, seed_ledger, _service(finish=True),
           "2 commits: Ledger.claim, then Ledger.start (claimed → in_progress, fenced by "
           "attempt_id)"),
    Config("service_life", "ledger", 10_000, seed_ledger, service_life,
           "5 commits: Ledger.claim, start, record_cost, verify (evidence link), dispose MIGRATED; "
           "one agent name per worker"),
    Config("ledger_sql_life", "ledger", 10_000, seed_ledger, ledger_sql_life,
           "5 commits: the statements of service_life (claim_next_unit, start_unit, record_cost, "
           "verify_unit, dispose_verified_unit) with its arguments on a raw connection, no service "
           "layer; one agent name per worker"),
    Config("raw_ledger_life", "ledger", 10_000, seed_ledger, raw_ledger_life,
           "5 commits: the hand-written claim CTE, then hand-written start, cost, verify and "
           "dispose statements (each with its event); one agent name per worker"),
    Config("pgqueuer", "pgqueuer", 15_000, seed_pgqueuer, pgqueuer_dequeue_complete,
           "2 commits: PGQueuer 1.6 Queries.dequeue(batch_size=1), then log_jobs(successful) "
           "(the queue manager's own completion statement)"),
    Config("pgqueuer_manager", "pgqueuer", 15_000, seed_pgqueuer, pgqueuer_manager,
           "PGQueuer 1.6 as its users run it: QueueManager.run(batch_size=1), one manager per "
           "worker connection, a no-op entrypoint (its own dequeue, completion log and "
           "heartbeat statements)"),
]  # fmt: skip


def variant(base: str, name: str, note: str, db_setup: str) -> Config:
    """Configuration `base` on a database that `db_setup` changed after seeding."""
    config = next(c for c in CONFIGS if c.name == base)
    return dataclasses.replace(config, name=name, loop=f"{config.loop}; {note}", db_setup=db_setup)


# Pull-next against the same backlog with flow controls that stop none of it: keys on the
# claimed units, caps and pauses on other fleets, paused units ahead in the queue.
CONFIGS.append(
    variant(
        "ledger_sql_claim",
        "ledger_sql_claim_controls",
        "with flow controls (raw.sql ledger_controls_seed): a key on each claimed unit, 200 "
        "other fleets capped, every other one paused, 1,000 paused units ahead in the queue",
        RAW["ledger_controls_seed"],
    )
)
