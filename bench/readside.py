"""The read side (issue 32) at a year's scale, and its write path beside the tallies.

    uv run --group bench python -m bench.readside fill --home /tmp/wl-readside --through 9
    uv run --group bench python -m bench.readside time --home /tmp/wl-readside --label before
    uv run --group bench python -m bench.readside migrate --home /tmp/wl-readside
    uv run --group bench python -m bench.readside time --home /tmp/wl-readside --label after
    uv run --group bench python -m bench.readside write [--windows 6] [--variants 0023,0027]

`fill` writes 1,000,000 units (bench/readside.sql) under the migrations up to `--through`;
`migrate` applies the rest; `time` times the dashboard's queries, `/metrics` and `report`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from argparse import RawTextHelpFormatter
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench.claims import sql_life
from bench.harness import recreated, server_url
from work_ledger.db.connect import connect, with_database
from work_ledger.db.migrate import apply_migrations, load_migrations
from work_ledger.db.queries import QUERIES as NAMED
from work_ledger.db.queries import parse_named_sql
from work_ledger.readside.gauges import read_gauges

FILL = parse_named_sql((Path(__file__).parent / "readside.sql").read_text(encoding="utf-8"))
DATABASE = "readside"
RESULTS = Path(__file__).parent / "results"
# What a dashboard panel, a scrape or a report asks, by the name the table shows; a view
# that exists only from a later migration on is timed where present. (Issue 32's variants of
# these, compared once, are in results/readside-20261201.md.)
VIEWS = ["v_queue_depth", "v_disposition_summary", "v_question_wait", "v_stall_counts",
         "v_budget", "v_cost_by_model", "v_daily", "v_forecast"]  # fmt: skip
QUERIES = {v: f"SELECT * FROM {v}" for v in VIEWS} | {
    "v_waiting": "SELECT * FROM v_waiting LIMIT 100",
    "v_rework (summary scopes)": "SELECT * FROM v_rework WHERE scope <> 'unit'",
    "v_cost_per_unit (summary scopes)": "SELECT * FROM v_cost_per_unit WHERE scope <> 'unit'",
    "v_stall_list (20 longest silent)":
        "SELECT * FROM v_stall_list ORDER BY stalled_seconds DESC LIMIT 20",
    "v_question_wait (group rows, as /metrics reads)":
        "SELECT * FROM v_question_wait WHERE scope = 'group'",
    "v_cost_per_unit unit scope, one keyset page of 50": "SELECT * FROM v_cost_per_unit WHERE"
        " scope = 'unit' AND external_ref > 'repo-500' ORDER BY external_ref LIMIT 50",
    "v_daily (the report's 28 days of '(all)')": "SELECT * FROM v_daily WHERE domain = '(all)'"
        " AND day >= (now() AT TIME ZONE 'UTC')::date - 28",
}  # fmt: skip
# The report's own queries from migration 0017 on (v_costliest_units, v_most_attempted_units).
RANKED = {
    "costliest 20 units (report)": ("read_costliest_units", (None, 20)),
    "costliest 20 units of one domain (report)": ("read_costliest_units", ("estate/search-1", 20)),
    "most attempts, 20 units (report)": ("read_reworked_units", (None, 20)),
}


async def fill(admin_url: str, *, units: int, events_per_unit: int, through: int) -> dict[str, Any]:
    conn = await connect(await recreated(admin_url, DATABASE))
    timings: dict[str, float] = {}
    try:
        await apply_migrations(
            conn, migrations=[m for m in load_migrations() if m.version <= through]
        )
        await conn.execute("SELECT set_config('wl_bench.units', $1, false)", str(units))
        await conn.execute(
            "SELECT set_config('wl_bench.events_per_unit', $1, false)", str(events_per_unit)
        )
        steps = ["fill_units", "fill_attempts", "fill_questions", "fill_events", "fill_done"]
        if await conn.fetchval("SELECT to_regclass('cost_records') IS NOT NULL"):
            steps.append("fill_costs")  # 0011 on: a cost record per attempt that cost anything
        for step in steps:
            t0 = time.perf_counter()
            # One statement at a time: VACUUM refuses to run in a script's implicit transaction.
            for statement in FILL[step].split(";\n"):
                await conn.execute(statement)
            timings[step] = round(time.perf_counter() - t0, 1)
            print(f"{step}: {timings[step]} s", flush=True)
        # Triggers were off: a schema that keeps summaries builds them from what is there.
        if await conn.fetchval("SELECT to_regproc('wl_rebuild_read_summaries') IS NOT NULL"):
            await conn.execute("SELECT wl_rebuild_read_summaries()")
        tables = ("work_units", "work_unit_attempts", "work_unit_events", "blocking_questions")
        counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in tables}
    finally:
        await conn.close()
    return {"fill_seconds": timings, **counts}


async def migrate(admin_url: str) -> dict[str, Any]:
    conn = await connect(with_database(admin_url, DATABASE))
    try:
        t0 = time.perf_counter()
        applied = await apply_migrations(conn)
        seconds = time.perf_counter() - t0
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return {"applied": [m.version for m in applied], "seconds": round(seconds, 1)}


async def _median_ms(conn: asyncpg.Connection, reps: int, call: Any) -> float:
    await call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def run_report(url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`work-ledger report` as a person runs it in a terminal of 80 columns; its seconds."""
    env = {**os.environ, "WL_DATABASE_URL": url, "COLUMNS": "80", "TERM": "dumb"}
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "work_ledger.cli", "report"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    return done, time.perf_counter() - t0


async def time_reads(admin_url: str, *, label: str, reps: int) -> dict[str, Any]:
    url = with_database(admin_url, DATABASE)
    conn = await connect(url)
    try:
        t0 = time.perf_counter()
        await read_gauges(conn)
        ms = {"/metrics read (first, cold)": round((time.perf_counter() - t0) * 1000, 1)}
        present = {r["viewname"] for r in await conn.fetch("SELECT viewname FROM pg_views")}
        for name, sql in QUERIES.items():
            if sql.split(" FROM ")[1].split()[0] in present:
                ms[name] = await _median_ms(conn, reps, lambda sql=sql: conn.fetch(sql))
        if "v_costliest_units" in present:
            for name, (query, args) in RANKED.items():
                ms[name] = await _median_ms(
                    conn, reps, lambda q=query, a=args: conn.fetch(NAMED[q], *a)
                )
        ms["/metrics read (warm, median)"] = await _median_ms(conn, reps, lambda: read_gauges(conn))
        migrations = await conn.fetchval("SELECT max(version) FROM wl_schema_migrations")
    finally:
        await conn.close()
    report, seconds = run_report(url)
    ms["work-ledger report (80 columns, whole command)"] = round(seconds * 1000)
    print(report.stdout[:6000], report.stderr[-2000:])
    lines = report.stdout.splitlines()
    shape = {
        "exit": report.returncode,
        "lines": len(lines),
        "widest": max(map(len, lines), default=0),
    }
    at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return {"label": label, "at": at, "migrations_through": migrations, "ms": ms,
            "load_average": os.getloadavg(), "report": shape,
            "report_output": report.stdout}  # fmt: skip


# -- the write path -------------------------------------------------------------------------
# Each variant's database and the migrations left out of it: `0019` the guard notes each unit
# change as a change row, folded into the tallies by wl_fold_read_summaries(); `0023` adds
# the program's course (change rows numbered and timed, notes of attempts' ends, claims and
# costs, folded into days), the cost per model still upserted by 0014's trigger; `0027` (all
# migrations) notes the cost per model and folds it like the rest; `off` keeps nothing (no
# tally triggers, no 0014 cost-per-model trigger: the baseline, the guard as before 0019).
VARIANTS: dict[str, tuple[str, set[int]]] = {
    "0019": ("readside_write_0019", {23, 27}),
    "0023": ("readside_write_0023", {27}),
    "0027": ("readside_write", set()),
    "off": ("readside_write_off", {19, 23, 27}),
}
TRIGGERS = (
    ("work_units", "read_summaries_on_insert"),
    ("work_units", "read_summaries_on_update"),
    ("cost_records", "cost_by_model_on_record"),
)
FOLD_SECONDS = 1.0
FOLD_EVERY_LIVES = 200  # 1,000 change rows: serve's FOLD_MIN_ROWS
CHUNK = 10
# One link per unit, as a real fleet records them (a link shared by every unit would make
# its row in wl_disposed_links a hot row: each disposal carrying it counts it there).
EVIDENCE = "https://ci.example.com/runs/{}"
WARM_LIVES = 500
WARM_SECONDS = 2.0
ROUNDS, WORKERS, WINDOW = 100, 64, 4.0


async def _fresh(admin_url: str, database: str, skip: set[int]) -> str:
    url = await recreated(admin_url, database)
    conn = await connect(url)
    try:
        await apply_migrations(
            conn, migrations=[m for m in load_migrations() if m.version not in skip]
        )
        await conn.execute(
            "INSERT INTO work_units (external_ref, fleet, domain) SELECT 'w-' || g, 'bench',"
            " 'domain-' || (g % 40) FROM generate_series(1, 60000) AS g"
        )
        # Some history before the statistics are taken: planned against an empty attempts
        # table, the statements' cached plans scan it whole until autovacuum analyzes it, at
        # a different moment in each database. The backlog's change rows are folded here:
        # they are the registration's, not the lives'.
        for _ in range(WARM_LIVES):
            await sql_life(conn, "warm-up", EVIDENCE)
        await conn.execute("SELECT wl_fold_read_summaries()")
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return url


async def _concurrent(conns: list[asyncpg.Connection], seconds: float, folder: Any) -> float:
    """Lives per second of all connections over one window, with a fold every second
    beside them, as serve runs it. The window ends when the workers stop: in a steady state
    each fold takes in about a second of changes, so the folds inside a window do its share.
    (Until 2026-12-02 it also waited for a last fold of everything: a serial tail charged to
    the folded variants only.)"""
    done, stop = 0, time.perf_counter() + seconds

    async def fold() -> None:
        while True:
            await asyncio.sleep(FOLD_SECONDS)
            if time.perf_counter() >= stop:
                return
            await folder.execute("SELECT wl_fold_read_summaries(1000)")

    async def worker(i: int, conn: asyncpg.Connection) -> None:
        nonlocal done
        agent = f"c{i}-{uuid.uuid4().hex[:6]}"
        while time.perf_counter() < stop and await sql_life(conn, agent, EVIDENCE) is not None:
            done += 1

    t0 = time.perf_counter()
    folding = asyncio.create_task(fold()) if folder is not None else None
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - t0
    if folding is not None:
        await folding
    return done / elapsed


async def measure_write(admin_url: str, windows: int, only: list[str] | None) -> dict[str, Any]:
    """Two figures, the databases taken in turn in small slices so that load from elsewhere
    falls on all alike: serial, one connection per database running CHUNK lives at a time,
    round-robin for ROUNDS rounds, its backend's CPU (from /proc: the server must run on
    this machine) and wall time per life, folding every FOLD_EVERY_LIVES; concurrent,
    WORKERS connections per WINDOW s, the databases in rotating order, lives per second and
    the ratio to `off` of the same round. The connections are new each round (four
    databases' 64 would pass max_connections), so each window follows WARM_SECONDS of
    uncounted lives: a new backend plans the statements and compiles the plpgsql first,
    which serve's pool pays once per connection. Afterwards each database's tallies are
    rebuilt and checked against the tables."""
    names = [n for n in VARIANTS if only is None or n in only or n == "off"]
    urls = {n: await _fresh(admin_url, VARIANTS[n][0], VARIANTS[n][1]) for n in names}
    off = await connect(urls["off"])
    for table, trigger in TRIGGERS:
        await off.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
    await off.close()
    serial = {n: await connect(urls[n]) for n in names}
    pids = {n: await c.fetchval("SELECT pg_backend_pid()") for n, c in serial.items()}
    backends = {n: psutil.Process(pid) for n, pid in pids.items()}
    cpu, wall, lives = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0), dict.fromkeys(names, 0)
    rates: dict[str, list[float]] = {n: [] for n in names}
    k = len(names)
    try:
        for r in range(ROUNDS):
            for n in names[r % k :] + names[: r % k]:
                before, t0 = backends[n].cpu_times(), time.perf_counter()
                for _ in range(CHUNK):
                    await sql_life(serial[n], f"serial-{n}", EVIDENCE)
                    lives[n] += 1
                    if n != "off" and lives[n] % FOLD_EVERY_LIVES == 0:
                        await serial[n].execute("SELECT wl_fold_read_summaries()")
                wall[n] += time.perf_counter() - t0
                after = backends[n].cpu_times()
                cpu[n] += after.user - before.user + after.system - before.system
        print(f"serial: {ROUNDS} rounds of {CHUNK} lives", flush=True)
        for w in range(windows):
            for n in names[w % k :] + names[: w % k]:
                conns = [await connect(urls[n]) for _ in range(WORKERS)]
                folder = await connect(urls[n]) if n != "off" else None
                try:
                    await _concurrent(conns, WARM_SECONDS, folder)  # untimed: warms the backends
                    rates[n].append(await _concurrent(conns, WINDOW, folder))
                finally:
                    for conn in (*conns, *([folder] if folder else [])):
                        await conn.close()
            print(f"window {w + 1}/{windows}", flush=True)
    finally:
        for conn in serial.values():
            await conn.close()
    drift = {}
    for n, url in urls.items():
        conn = await connect(url)
        for table, trigger in TRIGGERS if n == "off" else ():
            await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        await conn.execute("SELECT wl_rebuild_read_summaries()")
        drift[n] = await conn.fetchval("SELECT count(*) FROM wl_read_summary_drift()")
        await conn.close()
    per_life = {n: {"lives": lives[n], "cpu_ms": round(cpu[n] * 1000 / lives[n], 3),
                    "wall_ms": round(wall[n] * 1000 / lives[n], 3)} for n in names}  # fmt: skip

    def over(a: str, b: str) -> dict[str, float]:
        return {
            "backend CPU per life": round(per_life[a]["cpu_ms"] / per_life[b]["cpu_ms"], 3),
            "wall per serial life": round(per_life[a]["wall_ms"] / per_life[b]["wall_ms"], 3),
            "lives per s at c=64 (median of per-round ratios)": round(
                statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True)), 3
            ),
        }

    steps = [(a, b) for a, b in (("0023", "0019"), ("0027", "0023")) if {a, b} <= set(names)]
    ratios = {n: over(n, "off") for n in names if n != "off"}
    return {
        "rounds": ROUNDS, "chunk": CHUNK, "windows": windows, "workers": WORKERS,
        "window_seconds": WINDOW, "warm_seconds": WARM_SECONDS, "fold_seconds": FOLD_SECONDS,
        "fold_every_lives": FOLD_EVERY_LIVES, "serial": per_life,
        "lives_per_s_median": {n: round(statistics.median(v), 1) for n, v in rates.items()},
        "over_off": ratios | {f"{a} over {b}": over(a, b) for a, b in steps},
        "drift_rows_after_rebuild": drift, "raw_lives_per_s": rates,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=RawTextHelpFormatter)
    parser.add_argument("step", choices=["fill", "migrate", "time", "write"])
    parser.add_argument("--home", type=Path, default=Path("/tmp/wl-readside"))
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--events-per-unit", type=int, default=10)
    parser.add_argument("--through", type=int, default=10_000, help="last migration applied")
    parser.add_argument("--label", default="run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--windows", type=int, default=6, help="`write`: concurrent windows")
    parser.add_argument("--variants", help="`write`: the schemas to compare, e.g. 0023,0027")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    url = server_url(args.home)
    if args.step == "fill":
        work = fill(
            url, units=args.units, events_per_unit=args.events_per_unit, through=args.through
        )
    elif args.step == "migrate":
        work = migrate(url)
    elif args.step == "write":
        only = args.variants.split(",") if args.variants else None
        work = measure_write(url, args.windows, only)
    else:
        work = time_reads(url, label=args.label, reps=args.reps)
    result = asyncio.run(work)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"readside-{args.step}-{args.label}-{stamp}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(
        json.dumps({k: v for k, v in result.items() if k != "report_output"}, indent=2, default=str)
    )


if __name__ == "__main__":
    main()
