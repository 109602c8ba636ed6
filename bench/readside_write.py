"""The write path beside the read side's tallies (issue 32): what the triggers of migration
0012 cost the statements of a unit's life, with them and without them, side by side on one
database (`python -m bench.readside write`).

A life is what `Ledger` runs for one unit (claim, start, cost, verify, dispose: the
product's named statements, as bench/claims.py `ledger_sql_life` runs them). Two figures,
each taken alternately with the tally triggers enabled and disabled, rounds interleaved so
that load from elsewhere on the machine falls on both alike:

- serial: one connection, batches of lives; the PostgreSQL backend's CPU per life (from
  /proc, so the server must run on this machine) and the wall time per life;
- concurrent: 64 connections running lives for a window each; lives per second (the hot
  tally rows would show here as lock waits).

Afterwards the tallies are rebuilt (the lives run without triggers left them short) and
checked against the tables.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import asyncpg
import psutil

from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.db.migrate import apply_migrations
from work_ledger.db.queries import QUERIES

DATABASE = "readside_write"
TRIGGERS = ("read_summaries_on_insert", "read_summaries_on_update")
# One link per unit, as a real fleet records them (a link shared by every unit would make
# its row in wl_disposed_links a hot row: each disposal carrying it counts it there).
EVIDENCE = "https://ci.example.com/runs/{}"
LEASE_SECONDS = 900
SEED = 60_000
DOMAINS = 40


async def _life(conn: asyncpg.Connection, agent: str) -> bool:
    row = await conn.fetchrow(QUERIES["claim_next_unit"], agent, None, LEASE_SECONDS)
    if row is None:
        return False
    unit, attempt = row["unit"]["id"], row["attempt"]["id"]
    await conn.fetchrow(QUERIES["start_unit"], unit, ["claimed"], agent, attempt, agent)
    await conn.fetchrow(QUERIES["record_cost"], attempt, 125, agent, agent)
    verify = (unit, ["in_progress"], agent, attempt, EVIDENCE.format(unit), {}, agent)
    await conn.fetchrow(QUERIES["verify_unit"], *verify)
    await conn.fetchrow(QUERIES["dispose_verified_unit"], unit, agent, attempt, None, None, agent)
    return True


async def _set_triggers(admin: asyncpg.Connection, enabled: bool) -> None:
    verb = "ENABLE" if enabled else "DISABLE"
    for trigger in TRIGGERS:
        await admin.execute(f"ALTER TABLE work_units {verb} TRIGGER {trigger}")


async def _serial(conn: asyncpg.Connection, batch: int) -> tuple[float, float]:
    """(backend CPU ms, wall ms) per life over one batch."""
    backend = psutil.Process(await conn.fetchval("SELECT pg_backend_pid()"))
    agent = f"serial-{uuid.uuid4().hex[:6]}"
    before = backend.cpu_times()
    t0 = time.perf_counter()
    for _ in range(batch):
        await _life(conn, agent)
    wall = time.perf_counter() - t0
    after = backend.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return cpu * 1000 / batch, wall * 1000 / batch


async def _concurrent(conns: list[asyncpg.Connection], seconds: float) -> float:
    """Lives per second of all connections over one window."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(i: int, conn: asyncpg.Connection) -> None:
        nonlocal done
        agent = f"c{i}-{uuid.uuid4().hex[:6]}"
        while time.perf_counter() < stop:
            if not await _life(conn, agent):
                return
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    return done / (time.perf_counter() - t0)


async def _fresh(admin_url: str) -> str:
    admin = await connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    finally:
        await admin.close()
    await ensure_database(admin_url, DATABASE)
    url = with_database(admin_url, DATABASE)
    conn = await connect(url)
    try:
        await apply_migrations(conn)
        await conn.execute(
            "INSERT INTO work_units (external_ref, fleet, domain)"
            " SELECT 'w-' || g, 'bench', 'domain-' || (g % $2) FROM generate_series(1, $1) AS g",
            SEED,
            DOMAINS,
        )
        await conn.execute("VACUUM ANALYZE work_units")
    finally:
        await conn.close()
    return url


def _ratio(with_: list[float], without: list[float]) -> float:
    return round(statistics.median(with_) / statistics.median(without), 3)


async def measure_write(
    admin_url: str, *, rounds: int = 8, batch: int = 150, workers: int = 64, window: float = 4.0
) -> dict[str, Any]:
    url = await _fresh(admin_url)
    admin = await connect(url)
    serial = await connect(url)
    conns = [await connect(url) for _ in range(workers)]
    figures: dict[str, dict[str, list[float]]] = {
        mode: {"cpu_ms": [], "wall_ms": [], "lives_per_s": []} for mode in ("with", "without")
    }
    try:
        for n in range(rounds):
            # Alternate which mode goes first, so neither always runs on a warmer cache.
            for mode in ("with", "without") if n % 2 == 0 else ("without", "with"):
                await _set_triggers(admin, mode == "with")
                cpu, wall = await _serial(serial, batch)
                figures[mode]["cpu_ms"].append(cpu)
                figures[mode]["wall_ms"].append(wall)
                if n % 2 == 0:
                    figures[mode]["lives_per_s"].append(await _concurrent(conns, window))
            print(f"round {n + 1}/{rounds}", flush=True)
        await _set_triggers(admin, True)
        await admin.execute("SELECT wl_rebuild_read_summaries()")
        drift = await admin.fetchval("SELECT count(*) FROM wl_read_summary_drift()")
    finally:
        for conn in (admin, serial, *conns):
            await conn.close()
    medians = {
        mode: {k: round(statistics.median(v), 3) for k, v in f.items()}
        for mode, f in figures.items()
    }
    return {
        "rounds": rounds,
        "batch": batch,
        "workers": workers,
        "window_seconds": window,
        "median": medians,
        "with_over_without": {
            "backend CPU per life": _ratio(figures["with"]["cpu_ms"], figures["without"]["cpu_ms"]),
            "wall per serial life": _ratio(
                figures["with"]["wall_ms"], figures["without"]["wall_ms"]
            ),
            "lives per s at c=64": _ratio(
                figures["with"]["lives_per_s"], figures["without"]["lives_per_s"]
            ),
        },
        "drift_rows_after_rebuild": drift,
        "raw": figures,
    }
