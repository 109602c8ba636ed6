"""The write path beside the read side's tallies (issue 32): what keeping the tallies costs
the statements of a unit's life (`python -m bench.readside write`).

A life is what `Ledger` runs for one unit (claim, start, cost, verify, dispose: the
product's named statements, as bench/claims.py `ledger_sql_life` runs them). Four
databases side by side on one server, each with its own connections:

- `0016`: all migrations but the read side's later designs (0017, 0019, 0021): 0016's row
  triggers upsert the tallies in the statement that changes a unit;
- `0017`: all but 0019: a row trigger of its own appends one change row per unit change,
  and wl_fold_read_summaries() folds them into the tallies;
- `0019`: all but 0023: the unit's guard appends the change row, folded as in 0017;
- `0023`: all but 0027: 0019 and the program's course (change rows numbered and timed,
  notes of attempts' ends, claims and costs, folded into the days); the cost per model
  still upserted by 0014's trigger in the statement of each cost record;
- `0027`: all migrations: the cost per model noted (one insert) and folded like the rest;
- `off`: all but 0019, 0023 and 0027, with the tally triggers and 0014's cost-per-model
  trigger disabled (nothing kept: the baseline, the guard as it was before 0019). Until
  0027 the baseline kept 0014's upsert, which every variant ran alike.

Every variant has the other migrations (0018, 0020, ...), since the product's statements
that a life runs need them.

The folds' cost is counted: the serial connection folds every FOLD_EVERY_LIVES lives
(inside its measured CPU), and during a concurrent window a folder connection folds every
FOLD_SECONDS beside the workers (as `serve` does; see _concurrent). Each database has
WARM_LIVES lives and a VACUUM ANALYZE before anything is measured, and the seeded
backlog's change rows are folded then: they are the registration's, not the lives'.

Two figures, the databases taken in turn in small slices so that load from elsewhere on
this shared machine falls on all of them alike:

- serial: one connection per database, CHUNK lives at a time, round-robin for `rounds`
  rounds; each backend's CPU (from /proc, so the server must run on this machine) and wall
  time summed over all its chunks, per life;
- concurrent: 64 connections running lives for a window, the databases in rotating order
  each round; lives per second, and the ratio to `off` of the same round (median). The
  connections are new each round (four databases' 64 would pass max_connections), so each
  window is preceded by WARM_SECONDS of lives that are not counted: serve's pool keeps its
  connections, and a new backend's first statements (planning, compiling the plpgsql)
  would otherwise be charged to a window of a few seconds.

Afterwards each database's tallies are rebuilt and checked against the tables (the `off`
one's and the triggers-off rounds' tallies are short until then).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import asyncpg
import psutil

from bench.claims import NO_COST_DETAIL
from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.db.migrate import apply_migrations, load_migrations
from work_ledger.db.queries import QUERIES

# Each variant's database and the migrations left out of it.
VARIANTS: dict[str, tuple[str, set[int]]] = {
    "0016": ("readside_write_0016", {17, 19, 21, 23, 27}),
    "0017": ("readside_write_0017", {19, 23, 27}),
    "0019": ("readside_write_0019", {23, 27}),
    "0023": ("readside_write_0023", {27}),
    "0027": ("readside_write", set()),
    "off": ("readside_write_off", {19, 23, 27}),
}
FOLDED = ("0017", "0019", "0023", "0027")
TRIGGERS = (
    ("work_units", "read_summaries_on_insert"),
    ("work_units", "read_summaries_on_update"),
    ("cost_records", "cost_by_model_on_record"),
)
# Each variant against the schema just before it: what the later migration alone costs.
STEPS = (("0023", "0019"), ("0027", "0023"))
FOLD_SECONDS = 1.0
FOLD_EVERY_LIVES = 200  # 1,000 change rows: serve's FOLD_MIN_ROWS
CHUNK = 10
# One link per unit, as a real fleet records them (a link shared by every unit would make
# its row in wl_disposed_links a hot row: each disposal carrying it counts it there).
EVIDENCE = "https://ci.example.com/runs/{}"
LEASE_SECONDS = 900
SEED = 60_000
WARM_LIVES = 500
WARM_SECONDS = 2.0
DOMAINS = 40


async def _life(conn: asyncpg.Connection, agent: str) -> bool:
    row = await conn.fetchrow(QUERIES["claim_next_unit"], agent, None, LEASE_SECONDS)
    if row is None:
        return False
    unit, attempt = row["unit"]["id"], row["attempt"]["id"]
    await conn.fetchrow(QUERIES["start_unit"], unit, ["claimed"], agent, attempt, agent)
    await conn.fetchrow(QUERIES["record_cost"], attempt, 125, agent, agent, *NO_COST_DETAIL)
    verify = (unit, ["in_progress"], agent, attempt, EVIDENCE.format(unit), {}, agent)
    await conn.fetchrow(QUERIES["verify_unit"], *verify)
    await conn.fetchrow(QUERIES["dispose_verified_unit"], unit, agent, attempt, None, None, agent)
    return True


class _Serial:
    """One database's serial connection: lives a chunk at a time, CPU and wall summed."""

    def __init__(self, conn: asyncpg.Connection, backend: psutil.Process, folds: bool) -> None:
        self.conn, self.backend, self.folds = conn, backend, folds
        self.agent = f"serial-{uuid.uuid4().hex[:6]}"
        self.lives = 0
        self.cpu = 0.0
        self.wall = 0.0

    async def chunk(self, lives: int) -> None:
        before = self.backend.cpu_times()
        t0 = time.perf_counter()
        for _ in range(lives):
            await _life(self.conn, self.agent)
            self.lives += 1
            if self.folds and self.lives % FOLD_EVERY_LIVES == 0:
                await self.conn.execute("SELECT wl_fold_read_summaries()")
        self.wall += time.perf_counter() - t0
        after = self.backend.cpu_times()
        self.cpu += (after.user - before.user) + (after.system - before.system)


async def _concurrent(
    conns: list[asyncpg.Connection], seconds: float, folder: asyncpg.Connection | None
) -> float:
    """Lives per second of all connections over one window, with a fold every second
    beside them, as serve runs it.

    The window ends when the workers stop. In a steady state each fold takes in about a
    second of changes, so the folds run inside a window do about that window's share of
    folding (the first takes in the second before it, the last second is left to the next
    window). Until 2026-12-02 the window also waited, with all 64 workers idle, for a fold
    begun after its end and then a last fold of everything: a serial tail charged to the
    folded variants only."""
    done = 0
    stop = time.perf_counter() + seconds

    async def fold() -> None:
        assert folder is not None
        while True:
            await asyncio.sleep(FOLD_SECONDS)
            if time.perf_counter() >= stop:
                return
            await folder.execute("SELECT wl_fold_read_summaries(1000)")

    async def worker(i: int, conn: asyncpg.Connection) -> None:
        nonlocal done
        agent = f"c{i}-{uuid.uuid4().hex[:6]}"
        while time.perf_counter() < stop:
            if not await _life(conn, agent):
                return
            done += 1

    t0 = time.perf_counter()
    folding = asyncio.create_task(fold()) if folder is not None else None
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - t0
    if folding is not None:
        await folding
    return done / elapsed


async def _fresh(admin_url: str, database: str, skip: set[int]) -> str:
    admin = await connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    finally:
        await admin.close()
    await ensure_database(admin_url, database)
    url = with_database(admin_url, database)
    conn = await connect(url)
    try:
        await apply_migrations(
            conn, migrations=[m for m in load_migrations() if m.version not in skip]
        )
        await conn.execute(
            "INSERT INTO work_units (external_ref, fleet, domain)"
            " SELECT 'w-' || g, 'bench', 'domain-' || (g % $2) FROM generate_series(1, $1) AS g",
            SEED,
            DOMAINS,
        )
        # Some history before the statistics are taken: planned against an empty attempts
        # table, the statements' cached plans scan it whole until autovacuum analyzes it,
        # a minute or so later, and at a different moment in each database.
        for _ in range(WARM_LIVES):
            await _life(conn, "warm-up")
        if 17 not in skip:
            await conn.execute("SELECT wl_fold_read_summaries()")
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return url


async def measure_write(
    admin_url: str,
    *,
    rounds: int = 100,
    windows: int = 6,
    workers: int = 64,
    window: float = 4.0,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """`only`: the variants to run (`off` always among them: the ratios' baseline)."""
    chosen = {
        name: v for name, v in VARIANTS.items() if only is None or name in only or name == "off"
    }
    urls = {
        name: await _fresh(admin_url, database, skip) for name, (database, skip) in chosen.items()
    }
    off = await connect(urls["off"])
    try:
        for table, trigger in TRIGGERS:
            await off.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
    finally:
        await off.close()
    serials = {}
    for name, url in urls.items():
        conn = await connect(url)
        backend = psutil.Process(await conn.fetchval("SELECT pg_backend_pid()"))
        serials[name] = _Serial(conn, backend, folds=name in FOLDED)
    names = list(chosen)
    rates: dict[str, list[float]] = {name: [] for name in names}
    try:
        k = len(names)
        for n in range(rounds):
            for name in names[n % k :] + names[: n % k]:
                await serials[name].chunk(CHUNK)
        print(f"serial: {rounds} rounds of {CHUNK} lives", flush=True)
        for n in range(windows):
            for name in names[n % k :] + names[: n % k]:
                conns = [await connect(urls[name]) for _ in range(workers)]
                folder = await connect(urls[name]) if name in FOLDED else None
                try:
                    # Untimed: each new backend's first statements plan them and compile
                    # the plpgsql (the guard, the triggers), which serve's pool pays once
                    # per connection, not once per 4 s.
                    await _concurrent(conns, WARM_SECONDS, folder)
                    rates[name].append(await _concurrent(conns, window, folder))
                finally:
                    for conn in (*conns, *([folder] if folder else [])):
                        await conn.close()
            print(f"window {n + 1}/{windows}", flush=True)
    finally:
        for serial in serials.values():
            await serial.conn.close()
    drift = {}
    for name, url in urls.items():
        conn = await connect(url)
        try:
            if name == "off":
                for table, trigger in TRIGGERS:
                    await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
            await conn.execute("SELECT wl_rebuild_read_summaries()")
            drift[name] = await conn.fetchval("SELECT count(*) FROM wl_read_summary_drift()")
        finally:
            await conn.close()
    per_life = {
        name: {
            "lives": s.lives,
            "cpu_ms": round(s.cpu * 1000 / s.lives, 3),
            "wall_ms": round(s.wall * 1000 / s.lives, 3),
        }
        for name, s in serials.items()
    }
    ratios = {}
    for name in (n for n in names if n != "off"):
        ratios[name] = {
            "backend CPU per life": round(per_life[name]["cpu_ms"] / per_life["off"]["cpu_ms"], 3),
            "wall per serial life": round(
                per_life[name]["wall_ms"] / per_life["off"]["wall_ms"], 3
            ),
            "lives per s at c=64 (median of per-round ratios)": round(
                statistics.median(a / b for a, b in zip(rates[name], rates["off"], strict=True)),
                3,
            ),
            "lives per s at c=64 (ratio of medians)": round(
                statistics.median(rates[name]) / statistics.median(rates["off"]), 3
            ),
        }
    for later, earlier in STEPS:
        if later not in rates or earlier not in rates:
            continue
        ratios[f"{later} over {earlier}"] = {
            "backend CPU per life": round(
                per_life[later]["cpu_ms"] / per_life[earlier]["cpu_ms"], 3
            ),
            "lives per s at c=64 (median of per-round ratios)": round(
                statistics.median(a / b for a, b in zip(rates[later], rates[earlier], strict=True)),
                3,
            ),
            "lives per s at c=64 (ratio of medians)": round(
                statistics.median(rates[later]) / statistics.median(rates[earlier]), 3
            ),
        }
    return {
        "rounds": rounds,
        "chunk": CHUNK,
        "windows": windows,
        "workers": workers,
        "window_seconds": window,
        "warm_seconds": WARM_SECONDS,
        "fold_seconds": FOLD_SECONDS,
        "fold_every_lives": FOLD_EVERY_LIVES,
        "serial": per_life,
        "lives_per_s_median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "over_off": ratios,
        "drift_rows_after_rebuild": drift,
        "raw_lives_per_s": rates,
    }
