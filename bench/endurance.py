"""Long-poll, limits, soak and scale: what idle waiters and hostile clients cost serve, and
whether the claim stays fast over time and as the backlog and the event log grow."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench.claims import (
    EVIDENCE,
    RAW,
    explain_claim,
    ledger_over_pool,
    on_ledger,
    seed_ledger,
    service_life,
)
from bench.harness import (
    CONNECTIONS,
    TOKENS_TEMPLATE,
    MiniHttp,
    Server,
    app_process,
    measure,
    percentile,
    process_tree_cpu,
    repetitions,
)
from work_ledger.db.queries import QUERIES
from work_ledger.domain.model import Actor, Disposition

TABLES = ["work_units", "work_unit_attempts", "work_unit_events", "blocking_questions"]
INSERT_BATCH = (
    "INSERT INTO work_units (external_ref, fleet) "
    "SELECT 'arrival-' || $1::text || '-' || g, 'bench' FROM generate_series(1, $2) AS g "
    "RETURNING id"
)


async def longpoll(
    server: Server, tokens: list[str], waiters: int, rounds: int, per_round: int, home: Path
) -> dict[str, Any]:
    """`waiters` agents (a token each) long-poll POST /units/claim on an empty queue; units
    then arrive in committed batches. A wake-up's latency runs from its batch's commit (as
    the feeder saw it return) to the answer carrying the unit. serve's database connections
    and RSS are sampled every 50 ms throughout."""
    out: dict[str, Any] = {"waiters": waiters, "rounds": rounds, "units_per_round": per_round}
    arrived: dict[uuid.UUID, float] = {}
    woken: list[tuple[uuid.UUID, float]] = []  # (unit, when its waiter's answer arrived)
    expected = rounds * per_round
    all_woken, stop = asyncio.Event(), asyncio.Event()
    async with (
        server.fresh_database("longpoll", TOKENS_TEMPLATE) as url,
        app_process("serve", url, home) as app,
    ):

        async def sampler() -> None:
            conn = await asyncpg.connect(server.admin_url)
            try:
                while not stop.is_set():
                    row = await conn.fetchrow(CONNECTIONS, urlsplit(url).path[1:])
                    for key, value in (
                        ("db_connections_max", row["open"]),
                        ("db_connections_busy_max", row["busy"]),
                        ("server_rss_mb_max", round(app.ps.memory_info().rss / 2**20, 1)),
                    ):
                        out[key] = max(out.get(key, 0), value)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.05)
            finally:
                await conn.close()

        async def wait_for_unit(client: MiniHttp) -> None:
            answer: dict[str, Any] = {"unit": None}
            while answer["unit"] is None:
                answer = await client.post("/units/claim", {"wait_seconds": 60})
            woken.append((uuid.UUID(answer["unit"]["id"]), time.perf_counter()))
            if len(woken) >= expected:
                all_woken.set()

        sampling = asyncio.create_task(sampler())
        clients = [await MiniHttp.open(app.port, t) for t in tokens[:waiters]]
        tasks = [asyncio.create_task(wait_for_unit(c)) for c in clients]
        try:
            t0, cpu0 = time.perf_counter(), (server.cpu_seconds(), process_tree_cpu(app.ps))
            await asyncio.sleep(8)  # every waiter parked, and a few fallback wake-ups
            idle = time.perf_counter() - t0
            pg, app_cpu = server.cpu_seconds(), process_tree_cpu(app.ps)
            if pg is not None and cpu0[0] is not None:
                out["idle_server_cpu_pct"] = round(100 * (pg - cpu0[0]) / idle, 1)
            out["idle_app_cpu_pct"] = round(100 * (app_cpu - cpu0[1]) / idle, 1)
            out["idle_db_connections"] = out.get("db_connections_max")
            feeder = await asyncpg.connect(url)
            try:
                for r in range(rounds):
                    rows = await feeder.fetch(INSERT_BATCH, f"{r}", per_round)
                    arrived.update(dict.fromkeys((row["id"] for row in rows), time.perf_counter()))
                    await asyncio.sleep(0.5)
            finally:
                await feeder.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_woken.wait(), 30)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            stop.set()
            await sampling
            for client in clients:
                await client.close()
    # A waiter's answer may beat the feeder's commit acknowledgement by a hair: clamp at 0.
    ms = [max(0.0, (got - arrived[unit]) * 1000) for unit, got in woken if unit in arrived]
    out |= {"woken": len(ms), "expected": expected, "wake_p50_ms": percentile(ms, 50),
            "wake_p99_ms": percentile(ms, 99), "wake_max_ms": max(ms, default=None)}  # fmt: skip
    print(f"long-poll: {out}", flush=True)
    return out


async def _status(port: int, raw: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    except (ConnectionError, TimeoutError):
        line = b""
    writer.close()
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0


async def _held(port: int, sent: bytes) -> float:
    """Seconds until the server closes a connection that sent `sent` and stopped."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sent)
    began = time.monotonic()
    with contextlib.suppress(ConnectionError):
        await asyncio.wait_for(reader.read(), 120)
    writer.close()
    return time.monotonic() - began


STALLS = (
    b"",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
)
HOSTILE = (
    b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n",
    b"POST /units/claim HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"
    + b"[" * 100_000
    + b"]" * 100_000,
    b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{nope",
)


async def limits(server: Server, stalled: int, home: Path) -> dict[str, Any]:
    """Limits before work (docs/api.md): `stalled` connections that send nothing, half a
    header or half a body, held while GET /healthz is timed, then the slowest close by the
    server; an oversized header, a 100,000-deep JSON body and an anonymous malformed body
    (5xx counted); four 64 MiB header lines at once (serve's RSS before and after)."""
    out: dict[str, Any] = {"stalled": stalled}
    async with (
        server.fresh_database("limits", TOKENS_TEMPLATE) as url,
        app_process("serve", url, home) as app,
    ):
        held = [asyncio.create_task(_held(app.port, STALLS[i % 3])) for i in range(stalled)]
        await asyncio.sleep(1)
        began = time.monotonic()
        assert await _status(app.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == 200
        out["healthz_ms_while_held"] = round((time.monotonic() - began) * 1000, 1)
        out["slowest_close_s"] = round(max(await asyncio.gather(*held)), 1)
        out["statuses"] = [await _status(app.port, raw) for raw in HOSTILE]
        out["answers_5xx"] = sum(1 for s in out["statuses"] if s >= 500)
        out["rss_mb_before_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
        flood = b"GET /healthz HTTP/1.1\r\nX-Flood: " + b"f" * (64 * 2**20)
        await asyncio.gather(*(_status(app.port, flood) for _ in range(4)))
        out["rss_mb_after_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
    print(f"limits: {out}", flush=True)
    return out


async def _sizes(conn: asyncpg.Connection) -> dict[str, float]:
    rows = await conn.fetch(
        "SELECT relname, pg_total_relation_size(oid) AS bytes FROM pg_class "
        "WHERE relname = ANY($1) AND relkind = 'r'",
        TABLES,
    )
    return {r["relname"]: round(r["bytes"] / 2**20, 1) for r in rows}


async def soak(server: Server, template: str, lives: int, concurrency: int) -> dict[str, Any]:
    """`lives` full lives through the service at a fixed concurrency, autovacuum as
    configured: claim p50 over the first and the last tenth, table+index MB at those
    points, dead tuples and MultiXact age at the end."""
    out: dict[str, Any] = {"lives": lives, "concurrency": concurrency}
    latencies: list[float] = [0.0] * lives
    tenth = max(1, lives // 10)
    async with server.fresh_database("soak", template) as url:
        conn = await asyncpg.connect(url)
        try:
            await seed_ledger(conn, lives + concurrency)
            out["mb_start"] = await _sizes(conn)
            counter = iter(range(lives))
            t0 = time.perf_counter()
            async with ledger_over_pool(url, concurrency) as ledger:

                async def worker(i: int) -> None:
                    actor = Actor(f"soak-{i}")
                    for n in counter:
                        c0 = time.perf_counter()
                        claim = await ledger.claim(actor.name)
                        latencies[n] = time.perf_counter() - c0
                        assert claim.unit is not None
                        assert claim.attempt is not None
                        unit, attempt = str(claim.unit.id), claim.attempt.id
                        await ledger.start(unit, actor, attempt_id=attempt)
                        await ledger.record_cost(attempt, 125, actor)
                        await ledger.verify(unit, actor, EVIDENCE, attempt_id=attempt)
                        await ledger.dispose(unit, Disposition.MIGRATED, actor, attempt_id=attempt)
                        if n in (tenth, lives - tenth):
                            out[f"mb_at_{n}"] = await _sizes(conn)
                        elif n % 20_000 == 0 and n:
                            print(f"soak: {n:,} lives, {time.perf_counter() - t0:.0f}s", flush=True)

                await asyncio.gather(*(worker(i) for i in range(concurrency)))
            out["seconds"] = round(time.perf_counter() - t0, 1)
            out["mb_end"] = await _sizes(conn)
            stats = "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count"
            rows = await conn.fetch(
                stats + " FROM pg_stat_user_tables WHERE relname = ANY($1)", TABLES
            )
            out["dead_tuples_end"] = {r["relname"]: dict(r) for r in rows}
            out["mxid_age_end"] = await conn.fetchval(
                "SELECT mxid_age(datminmxid) FROM pg_database WHERE datname = current_database()"
            )
        finally:
            await conn.close()
    for label, part in (("first", latencies[:tenth]), ("last", latencies[-tenth:])):
        ms = [x * 1000 for x in part]
        out[label] = {"claim_p50_ms": percentile(ms, 50), "claim_p99_ms": percentile(ms, 99)}
    print(f"soak: {out['first']} -> {out['last']} in {out['seconds']}s", flush=True)
    return out


PAGE = 100


async def claim_by_backlog(
    server: Server, template: str, sizes: dict[str, int], args: Any
) -> dict[str, Any]:
    """Service claim latency with a small and a large ready backlog; each claim followed,
    untimed, by the rest of the unit's life (each worker holds one live lease, as in a
    fleet) and one new unit (the backlog keeps its size); the claim's plans at the large one."""
    out: dict[str, Any] = {"sizes": sizes}
    workers = on_ledger(partial(service_life, replenish=True))
    for label, size in sizes.items():
        async with server.fresh_database(f"scale_{label}", template) as url:
            conn = await asyncpg.connect(url)
            t0 = time.perf_counter()
            await seed_ledger(conn, size)
            out[f"seed_seconds_{label}"] = round(time.perf_counter() - t0, 1)

            async def window(_name: str, c: int, url: str = url) -> dict[str, Any]:
                async with workers(url, c) as ops:
                    return await measure(
                        ops, server=server, warmup=args.warmup, duration=args.duration
                    )

            section = f"scale {label} ({size:,} ready)"
            medians = (await repetitions(section, ["claim"], [1, 16], args.reps, window))["median"]
            out[label], out[f"{label}_c16"] = medians["claim"]["1"], medians["claim"]["16"]
            if label == "large":
                out["explain_large"] = await explain_claim(conn)
            await conn.close()
    return out


EVENTS_SEED = """
INSERT INTO work_unit_events (unit_id, event_type, agent_id, detail, created_at)
SELECT units.ids[1 + (g % array_length(units.ids, 1))], 'heartbeat', 'bench', '{}',
       timestamptz '2025-01-01' + g * interval '1 millisecond'
FROM (SELECT array_agg(id) AS ids FROM work_units) AS units,
     generate_series($1::bigint, $2::bigint) AS g
"""


async def event_pages(server: Server, template: str, n: int, reps: int) -> dict[str, Any]:
    """A keyset page (Ledger.list_events) at the newest and the oldest end of `n` events."""
    async with server.fresh_database("events", template) as url:
        conn = await asyncpg.connect(url)
        t0 = time.perf_counter()
        await conn.execute(RAW["ledger_seed"], 1000)
        # Seeding only: no per-row foreign-key triggers (superuser; this session), and the
        # secondary indexes built once after the load (the same definitions, read back).
        await conn.execute("SET session_replication_role = replica")
        await conn.execute("SET maintenance_work_mem = '256MB'")
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'work_unit_events' "
            "AND indexname IN ('work_unit_events_keyset_idx', 'work_unit_events_unit_idx')"
        )
        for index in indexes:
            await conn.execute(f'DROP INDEX "{index["indexname"]}"')
        for start in range(1, n + 1, 1_000_000):
            await conn.execute(EVENTS_SEED, start, min(n, start + 999_999))
        for index in indexes:
            await conn.execute(index["indexdef"])
        await conn.execute("SET session_replication_role = DEFAULT")
        await conn.execute("VACUUM ANALYZE work_unit_events")
        out: dict[str, Any] = {"rows": n, "seed_seconds": round(time.perf_counter() - t0, 1)}
        out["total_size"] = await conn.fetchval(
            "SELECT pg_size_pretty(pg_total_relation_size('work_unit_events'))"
        )
        oldest = await conn.fetchval(  # the cursor whose page is the oldest PAGE events
            "SELECT id FROM work_unit_events ORDER BY created_at, id OFFSET $1 LIMIT 1", PAGE
        )
        async with ledger_over_pool(url, 1) as ledger:
            for label, cursor in (("newest", None), ("oldest", oldest)):
                sql = QUERIES["list_events"].replace("$1", "NULL::uuid").replace("$3", str(PAGE))
                sql = sql.replace("$2", f"{cursor or 'NULL'}::bigint")
                out[f"explain_{label}"] = [r[0] for r in await conn.fetch("EXPLAIN ANALYZE " + sql)]
                latencies = []
                for _ in range(max(3, reps) * 100):
                    t0 = time.perf_counter()
                    page = await ledger.list_events(limit=PAGE, cursor=cursor and str(cursor))
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert len(page.items) == PAGE
                out[f"{label}_page"] = {
                    "pages": len(latencies),
                    "p50_ms": percentile(latencies, 50),
                    "p99_ms": percentile(latencies, 99),
                }
                print(f"events {n:,}: {label} page {out[f'{label}_page']}", flush=True)
        await conn.close()
    return out
