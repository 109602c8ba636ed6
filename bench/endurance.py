"""Long-poll and soak: what idle waiters cost, and whether the claim stays fast over time.

Long-poll: N agents (one token each) wait on POST /units/claim with wait_seconds against
`work-ledger serve` and an empty queue. Units then arrive in small committed batches;
each wake-up latency is the time from the batch's commit (as this client saw it return)
to the moment a waiter's response carrying one of its units arrives. Database connections
of the ledger's database and the server's RSS are sampled every 50 ms throughout.

Limits: `limits` holds stalled connections and sends hostile input to serve (below).

Soak: N full unit lives (claim, start, cost, verify, dispose) through the service at a
fixed concurrency, with autovacuum as configured. Claim p50 over the first and the last
tenth, table+index sizes at those points, dead tuples and MultiXact age at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench import httpbench
from bench.claims import EVIDENCE, ledger_over_pool, seed_ledger
from bench.harness import Server, percentile
from work_ledger.domain.model import Actor, Disposition

TABLES = ("work_units", "work_unit_attempts", "work_unit_events", "blocking_questions")
INSERT_BATCH = (
    "INSERT INTO work_units (external_ref, fleet) "
    "SELECT 'arrival-' || $1::text || '-' || g, 'bench' FROM generate_series(1, $2) AS g "
    "RETURNING id"
)


async def _sampler(
    server: Server, url: str, app: httpbench.AppProcess, stop: asyncio.Event, out: dict[str, Any]
) -> None:
    name = urlsplit(url).path.lstrip("/")
    conn = await asyncpg.connect(server.admin_url)
    try:
        while not stop.is_set():
            # The server's own connections only (it names itself work-ledger), not ours.
            row = await conn.fetchrow(
                "SELECT count(*) AS open, count(*) FILTER (WHERE state <> 'idle') AS busy "
                "FROM pg_stat_activity WHERE datname = $1 AND application_name = 'work-ledger'",
                name,
            )
            rss = app.ps.memory_info().rss / 2**20
            out["db_connections_max"] = max(out.get("db_connections_max", 0), row["open"])
            out["db_connections_busy_max"] = max(out.get("db_connections_busy_max", 0), row["busy"])
            out["server_rss_mb_max"] = max(out.get("server_rss_mb_max", 0.0), round(rss, 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    finally:
        await conn.close()


async def longpoll(
    server: Server, tokens: list[str], waiters: int, rounds: int, per_round: int, home: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {"waiters": waiters, "rounds": rounds, "units_per_round": per_round}
    arrived: dict[uuid.UUID, float] = {}
    woken: list[tuple[uuid.UUID, float]] = []  # (unit, when its waiter's answer arrived)
    expected = rounds * per_round
    all_woken = asyncio.Event()
    async with (
        server.fresh_database("longpoll", httpbench.TEMPLATE) as url,
        httpbench.app_process("serve", url, home) as app,
    ):
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sampler(server, url, app, stop, out))
        clients = [
            httpbench.MiniHttp(app.port, {"Authorization": f"Bearer {t}"}) for t in tokens[:waiters]
        ]
        for client in clients:
            await client.open()

        async def wait_for_unit(client: httpbench.MiniHttp) -> None:
            while True:
                answer = await client.post("/units/claim", {"wait_seconds": 60})
                if answer.get("unit") is not None:
                    woken.append((uuid.UUID(answer["unit"]["id"]), time.perf_counter()))
                    if len(woken) >= expected:
                        all_woken.set()
                    return

        tasks = [asyncio.create_task(wait_for_unit(c)) for c in clients]
        try:
            t_idle = time.perf_counter()
            cpu0 = server.cpu_seconds(), httpbench.process_cpu(app)
            await asyncio.sleep(8)  # every waiter parked, and a few fallback wake-ups
            cpu1 = server.cpu_seconds(), httpbench.process_cpu(app)
            idle = time.perf_counter() - t_idle
            out["idle_server_cpu_pct"] = _pct(cpu0[0], cpu1[0], idle)
            out["idle_app_cpu_pct"] = _pct(cpu0[1], cpu1[1], idle)
            out["idle_db_connections"] = out.get("db_connections_max")
            feeder = await asyncpg.connect(url)
            try:
                for r in range(rounds):
                    rows = await feeder.fetch(INSERT_BATCH, f"{r}", per_round)
                    committed = time.perf_counter()
                    for row in rows:
                        arrived[row["id"]] = committed
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
            await sampler
            for client in clients:
                await client.close()
    # A waiter's answer may beat the feeder's commit acknowledgement by a hair: clamp at 0.
    ms = [max(0.0, (got - arrived[unit]) * 1000) for unit, got in woken if unit in arrived]
    out.update(
        woken=len(ms),
        expected=expected,
        wake_p50_ms=percentile(ms, 50),
        wake_p99_ms=percentile(ms, 99),
        wake_max_ms=max(ms) if ms else None,
    )
    print(f"long-poll: {out}", flush=True)
    return out


STALLS = (
    b"",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
)


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


async def _healthz_ms(port: int) -> float:
    began = time.monotonic()
    status = await _status(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200, status
    return (time.monotonic() - began) * 1000


async def limits(server: Server, stalled: int, home: Path) -> dict[str, Any]:
    """Limits before work (docs/api.md) against serve: `stalled` connections that send
    nothing, half a header or half a body, held while GET /healthz is timed from a fresh
    client, then the slowest close by the server; an oversized header, a 100,000-deep JSON
    body and an anonymous malformed body (5xx counted); four 64 MiB header lines at once
    (serve's RSS before and after)."""
    out: dict[str, Any] = {"stalled": stalled}
    async with (
        server.fresh_database("limits", httpbench.TEMPLATE) as url,
        httpbench.app_process("serve", url, home) as app,
    ):
        held = [asyncio.create_task(_held(app.port, STALLS[i % 3])) for i in range(stalled)]
        await asyncio.sleep(1)
        out["healthz_ms_while_held"] = round(await _healthz_ms(app.port), 1)
        closes = await asyncio.gather(*held)
        out["slowest_close_s"] = round(max(closes), 1)
        statuses = [
            await _status(
                app.port, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n"
            ),
            await _status(
                app.port,
                b"POST /units/claim HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"
                + b"[" * 100_000
                + b"]" * 100_000,
            ),
            await _status(
                app.port, b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{nope"
            ),
        ]
        out["statuses"] = statuses
        out["answers_5xx"] = sum(1 for s in statuses if s >= 500)
        out["rss_mb_before_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
        flood = b"GET /healthz HTTP/1.1\r\nX-Flood: " + b"f" * (64 * 2**20)
        await asyncio.gather(*(_status(app.port, flood) for _ in range(4)))
        out["rss_mb_after_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
    return out
    print(f"limits: {out}", flush=True)
    return out


def _pct(a: float | None, b: float | None, seconds: float) -> float | None:
    return None if a is None or b is None else round(100 * (b - a) / seconds, 1)


async def _sizes(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT relname, pg_total_relation_size(oid) AS bytes FROM pg_class "
        "WHERE relname = ANY($1) AND relkind = 'r'",
        list(TABLES),
    )
    return {r["relname"]: r["bytes"] for r in rows}


async def soak(server: Server, template: str, lives: int, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {"lives": lives, "concurrency": concurrency}
    latencies: list[float] = [0.0] * lives
    tenth = max(1, lives // 10)
    async with server.fresh_database("soak", template) as url:
        conn = await asyncpg.connect(url)
        try:
            await seed_ledger(conn, lives + concurrency)
            out["sizes_start"] = await _sizes(conn)
            counter = iter(range(lives))
            marks: dict[str, Any] = {}
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
                        if n == tenth:
                            marks["sizes_after_first_tenth"] = await _sizes(conn)
                        elif n == lives - tenth:
                            marks["sizes_at_last_tenth"] = await _sizes(conn)
                        elif n % 20_000 == 0 and n:
                            print(f"soak: {n:,} lives, {time.perf_counter() - t0:.0f}s", flush=True)

                await asyncio.gather(*(worker(i) for i in range(concurrency)))
            out["seconds"] = round(time.perf_counter() - t0, 1)
            out.update(marks)
            out["sizes_end"] = await _sizes(conn)
            out["dead_tuples_end"] = {
                r["relname"]: {"live": r["n_live_tup"], "dead": r["n_dead_tup"],
                               "autovacuums": r["autovacuum_count"],
                               "autoanalyzes": r["autoanalyze_count"]}
                for r in await conn.fetch(
                    "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count "
                    "FROM pg_stat_user_tables WHERE relname = ANY($1)",
                    list(TABLES),
                )
            }  # fmt: skip
            out["mxid_age_end"] = {
                "database": await conn.fetchval(
                    "SELECT mxid_age(datminmxid) FROM pg_database "
                    "WHERE datname = current_database()"
                ),
                "work_units": await conn.fetchval(
                    "SELECT mxid_age(relminmxid) FROM pg_class WHERE relname = 'work_units'"
                ),
                "work_unit_attempts": await conn.fetchval(
                    "SELECT mxid_age(relminmxid) FROM pg_class WHERE relname = 'work_unit_attempts'"
                ),
            }
        finally:
            await conn.close()
    first = [x * 1000 for x in latencies[:tenth]]
    last = [x * 1000 for x in latencies[-tenth:]]
    out["first"] = {"claim_p50_ms": percentile(first, 50), "claim_p99_ms": percentile(first, 99)}
    out["last"] = {"claim_p50_ms": percentile(last, 50), "claim_p99_ms": percentile(last, 99)}
    print(f"soak: {out['first']} -> {out['last']} in {out['seconds']}s", flush=True)
    return out


def _mb(sizes: dict[str, int] | None) -> str:
    if not sizes:
        return "-"
    return ", ".join(f"{k} {v / 2**20:.1f}" for k, v in sorted(sizes.items()))


def markdown(result: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lp = result.get("longpoll")
    if lp:
        lines += [
            "## Long-poll",
            "",
            f"{lp['waiters']:,} agents (one token each) waiting on POST /units/claim "
            f"(wait_seconds=60) against `work-ledger serve`; then {lp['rounds']} batches of "
            f"{lp['units_per_round']} units, 0.5 s apart.",
            "",
            "| figure | value |",
            "|---|---:|",
            f"| woken with a unit | {lp['woken']} of {lp['expected']} |",
            f"| wake-up p50 ms | {_f(lp['wake_p50_ms'])} |",
            f"| wake-up p99 ms | {_f(lp['wake_p99_ms'])} |",
            f"| wake-up max ms | {_f(lp['wake_max_ms'])} |",
            f"| DB connections open after 8 s idle | {lp.get('idle_db_connections')} |",
            f"| DB connections open, max | {lp.get('db_connections_max')} |",
            f"| DB connections busy (not idle), max | {lp.get('db_connections_busy_max')} |",
            f"| server RSS max MB | {lp.get('server_rss_mb_max')} |",
            f"| idle: app CPU % / PostgreSQL CPU % | {lp.get('idle_app_cpu_pct')} / "
            f"{lp.get('idle_server_cpu_pct')} |",
        ]
    sk = result.get("soak")
    if sk:
        lines += [
            "",
            "## Soak",
            "",
            f"{sk['lives']:,} full unit lives through the service at c={sk['concurrency']} "
            f"in {sk['seconds']} s.",
            "",
            "| figure | first 10% | last 10% |",
            "|---|---:|---:|",
            f"| claim p50 ms | {_f(sk['first']['claim_p50_ms'])} "
            f"| {_f(sk['last']['claim_p50_ms'])} |",
            f"| claim p99 ms | {_f(sk['first']['claim_p99_ms'])} "
            f"| {_f(sk['last']['claim_p99_ms'])} |",
            "",
            f"Table+index MB at start: {_mb(sk.get('sizes_start'))}; after the first 10%: "
            f"{_mb(sk.get('sizes_after_first_tenth'))}; at the last 10%: "
            f"{_mb(sk.get('sizes_at_last_tenth'))}; at the end: {_mb(sk.get('sizes_end'))}.",
            "",
            f"At the end: dead tuples {sk['dead_tuples_end']}; mxid_age {sk['mxid_age_end']}.",
        ]
    return lines


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
