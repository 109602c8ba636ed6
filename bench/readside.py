"""The read side at a year's scale (issue 32): fill a ledger of 1,000,000 units, time what
a dashboard, `/metrics` and `work-ledger report` read from it, before and after a change.

    uv run --group bench python -m bench.readside fill --home /tmp/wl-readside --through 9
    uv run --group bench python -m bench.readside time --home /tmp/wl-readside --label before
    uv run --group bench python -m bench.readside migrate --home /tmp/wl-readside
    uv run --group bench python -m bench.readside time --home /tmp/wl-readside --label after
    uv run --group bench python -m bench.readside write --home /tmp/wl-readside
    uv run --group bench python -m bench.readside table before.json after.json write.json

`fill` makes database `readside` on the embedded server under `--home` (or on
WL_DATABASE_URL's server), applies the migrations numbered up to `--through` (the schema
before the change), and writes the estate with generate_series (`bench/readside.sql`).
`migrate` applies the rest, which builds any kept summary from what is there. `time`
times each query (median of `--reps` after one unmeasured run), the first and the warm
`/metrics` read, and `work-ledger report` at 80 columns as a person runs it. `write` (in
`bench/readside_write.py`) measures the write path's statements with and without the
summaries' triggers, side by side. `table` writes the markdown of the runs given.
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
from pathlib import Path
from typing import Any

import asyncpg

from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.db.migrate import apply_migrations, load_migrations
from work_ledger.db.queries import QUERIES as NAMED
from work_ledger.db.queries import parse_named_sql
from work_ledger.readside.gauges import read_gauges

FILL = parse_named_sql((Path(__file__).parent / "readside.sql").read_text(encoding="utf-8"))
DATABASE = "readside"
RESULTS = Path(__file__).parent / "results"

# What a dashboard panel, a scrape or a report asks, by the name the table shows.
QUERIES = {
    "v_queue_depth": "SELECT * FROM v_queue_depth",
    "v_disposition_summary": "SELECT * FROM v_disposition_summary",
    "v_rework (summary scopes)": "SELECT * FROM v_rework WHERE scope <> 'unit'",
    "v_cost_per_unit (summary scopes)": "SELECT * FROM v_cost_per_unit WHERE scope <> 'unit'",
    "v_stall_list (count by domain)": ("SELECT domain, count(*) FROM v_stall_list GROUP BY domain"),
    "v_stall_list (20 longest silent)": (
        "SELECT * FROM v_stall_list ORDER BY stalled_seconds DESC LIMIT 20"
    ),
    "v_stall_list (20 longest silent, the view's order)": "SELECT * FROM v_stall_list LIMIT 20",
    "v_question_wait": "SELECT * FROM v_question_wait",
    "v_question_wait (group rows, as /metrics reads)": (
        "SELECT * FROM v_question_wait WHERE scope = 'group'"
    ),
    "costliest 20 units (v_cost_per_unit unit scope by cost)": (
        "SELECT * FROM v_cost_per_unit WHERE scope = 'unit' ORDER BY cost_cents DESC LIMIT 20"
    ),
    "most attempts, 20 units (v_rework by id from v_cost_per_unit)": (
        "SELECT * FROM v_rework WHERE scope = 'unit' AND unit_id = ANY (ARRAY(SELECT unit_id"
        " FROM v_cost_per_unit WHERE scope = 'unit' AND attempts > 1"
        " ORDER BY attempts DESC, external_ref LIMIT 20))"
    ),
    "v_rework unit scope, one keyset page of 50 (ids from v_cost_per_unit)": (
        "SELECT * FROM v_rework WHERE scope = 'unit' AND unit_id = ANY (ARRAY(SELECT unit_id"
        " FROM v_cost_per_unit WHERE scope = 'unit' AND attempts > 1"
        " AND external_ref > 'repo-500' ORDER BY external_ref LIMIT 50))"
    ),
    "v_rework unit scope, one keyset page of 50": (
        "SELECT * FROM v_rework WHERE scope = 'unit' AND external_ref > 'repo-500'"
        " ORDER BY external_ref LIMIT 50"
    ),
    "v_cost_per_unit unit scope, one keyset page of 50": (
        "SELECT * FROM v_cost_per_unit WHERE scope = 'unit' AND external_ref > 'repo-500'"
        " ORDER BY external_ref LIMIT 50"
    ),
}
# Views that exist only from a later migration on; timed where present.
LATER_VIEWS = {
    "v_stall_counts": "SELECT * FROM v_stall_counts",
    "v_waiting": "SELECT * FROM v_waiting LIMIT 100",
    "v_budget": "SELECT * FROM v_budget",
    "v_cost_by_model": "SELECT * FROM v_cost_by_model",
    "v_daily": "SELECT * FROM v_daily",
    "v_daily (the report's 28 days of '(all)')": (
        "SELECT * FROM v_daily WHERE domain = '(all)'"
        " AND day >= (now() AT TIME ZONE 'UTC')::date - 28"
    ),
    "v_forecast": "SELECT * FROM v_forecast",
}
# The report's own queries from migration 0017 on (v_costliest_units, v_most_attempted_units).
RANKED = {
    "costliest 20 units (report: v_costliest_units, then v_cost_per_unit by id)": (
        "read_costliest_units",
        (None, 20),
    ),
    "costliest 20 units of one domain (report)": ("read_costliest_units", ("estate/search-1", 20)),
    "most attempts, 20 units (report: v_most_attempted_units, then v_rework by id)": (
        "read_reworked_units",
        (None, 20),
    ),
}


def server_url(home: Path) -> str:
    """The admin URL: WL_DATABASE_URL's server when set, else the embedded one under home."""
    if os.environ.get("WL_DATABASE_URL"):
        return os.environ["WL_DATABASE_URL"]
    from work_ledger.embedded.server import embedded_server_url

    return embedded_server_url(home)


async def fill(admin_url: str, *, units: int, events_per_unit: int, through: int) -> dict[str, Any]:
    admin = await connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    finally:
        await admin.close()
    await ensure_database(admin_url, DATABASE)
    url = with_database(admin_url, DATABASE)
    conn = await connect(url)
    timings: dict[str, float] = {}
    try:
        await apply_migrations(
            conn, migrations=[m for m in load_migrations() if m.version <= through]
        )
        await conn.execute("SELECT set_config('wl_bench.units', $1, false)", str(units))
        await conn.execute(
            "SELECT set_config('wl_bench.events_per_unit', $1, false)", str(events_per_unit)
        )
        for step in ("fill_units", "fill_attempts", "fill_questions", "fill_events", "fill_done"):
            t0 = time.perf_counter()
            # One statement at a time: VACUUM refuses to run in a script's implicit transaction.
            for statement in FILL[step].split(";\n"):
                await conn.execute(statement)
            timings[step] = round(time.perf_counter() - t0, 1)
            print(f"{step}: {timings[step]} s", flush=True)
        if await conn.fetchval("SELECT to_regclass('cost_records') IS NOT NULL"):
            # A schema with cost records (0011 on): one per attempt that cost anything, so
            # the course's days (0023) have cost to sum.
            t0 = time.perf_counter()
            for statement in FILL["fill_costs"].split(";\n"):
                await conn.execute(statement)
            timings["fill_costs"] = round(time.perf_counter() - t0, 1)
            print(f"fill_costs: {timings['fill_costs']} s", flush=True)
        # Triggers were off: a schema that keeps summaries builds them from what is there.
        if await conn.fetchval("SELECT to_regproc('wl_rebuild_read_summaries') IS NOT NULL"):
            await conn.execute("SELECT wl_rebuild_read_summaries()")
        counts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM work_units) AS units,"
            " (SELECT count(*) FROM work_unit_attempts) AS attempts,"
            " (SELECT count(*) FROM work_unit_events) AS events,"
            " (SELECT count(*) FROM blocking_questions) AS questions"
        )
    finally:
        await conn.close()
    return {"fill_seconds": timings, **dict(counts or {})}


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


async def _median_ms(
    conn: asyncpg.Connection, sql: str, reps: int, args: tuple[Any, ...] = ()
) -> float:
    await conn.fetch(sql, *args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await conn.fetch(sql, *args)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def _report_run(url: str, *extra: str) -> dict[str, Any]:
    """`work-ledger report` as a person runs it in a terminal of 80 columns."""
    env = {**os.environ, "WL_DATABASE_URL": url, "COLUMNS": "80", "TERM": "dumb"}
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "work_ledger.cli", "report", *extra],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - t0
    lines = done.stdout.splitlines()
    return {
        "seconds": round(seconds, 2),
        "lines": len(lines),
        "widest": max((len(line) for line in lines), default=0),
        "exit": done.returncode,
        "stderr": done.stderr[-2000:],
        "output": done.stdout,
    }


async def time_reads(admin_url: str, *, label: str, reps: int) -> dict[str, Any]:
    url = with_database(admin_url, DATABASE)
    conn = await connect(url)
    try:
        t0 = time.perf_counter()
        await read_gauges(conn)
        first_scrape = (time.perf_counter() - t0) * 1000
        present = {r["viewname"] for r in await conn.fetch("SELECT viewname FROM pg_views")}
        later = {k: v for k, v in LATER_VIEWS.items() if k in present}
        queries = {**QUERIES, **later}
        results = {name: await _median_ms(conn, sql, reps) for name, sql in queries.items()}
        if "v_costliest_units" in present:
            for name, (query, args) in RANKED.items():
                results[name] = await _median_ms(conn, NAMED[query], reps, args)
        scrapes = []
        for _ in range(reps):
            t0 = time.perf_counter()
            await read_gauges(conn)
            scrapes.append((time.perf_counter() - t0) * 1000)
        results["/metrics read (first, cold)"] = round(first_scrape, 1)
        results["/metrics read (warm, median)"] = round(statistics.median(scrapes), 1)
        migrations = await conn.fetchval("SELECT max(version) FROM wl_schema_migrations")
    finally:
        await conn.close()
    report = _report_run(url)
    print(report["output"][:6000])
    results["work-ledger report (80 columns, whole command)"] = round(report["seconds"] * 1000)
    return {
        "label": label,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "migrations_through": migrations,
        "load_average": os.getloadavg(),
        "ms": results,
        "report": {k: v for k, v in report.items() if k != "output"},
        "report_output": report["output"],
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    timed = [r for r in runs if "ms" in r]
    head = "| query | " + " | ".join(f"{r['label']} (ms)" for r in timed) + " |"
    lines = [head, "|---|" + "---:|" * len(timed)]
    names = list(dict.fromkeys(name for r in timed for name in r["ms"]))
    for name in names:
        cells = [f"{r['ms'][name]:,}" if name in r["ms"] else "" for r in timed]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for r in timed:
        rep = r["report"]
        lines.append(
            f"\n{r['label']}: {r['at']}, migrations through {r['migrations_through']}, load "
            f"{r['load_average'][0]:.1f}; report: {rep['lines']:,} lines, widest "
            f"{rep['widest']} columns, exit {rep['exit']}."
        )
    for r in runs:
        if "over_off" in r:
            lines += _write_table(r)
    return "\n".join(lines) + "\n"


def _write_table(run: dict[str, Any]) -> list[str]:
    """The write path with each schema's triggers and with none, side by side."""
    serial, rates, ratios = run["serial"], run["lives_per_s_median"], run["over_off"]
    kept = [v for v in serial if v != "off"]  # runs before 0019 had 0016 and 0017 only
    heads = {
        "0016": "0016 (row triggers)",
        "0017": "0017 (change rows + fold)",
        "0019": "0019 (noted by the guard)",
        "0023": "0023 (and the course's days)",
        "0027": "0027 (cost per model folded)",
    }
    lines = [
        "",
        f"Write path: {run['rounds']} rounds of {run['chunk']} serial lives per database,"
        f" round-robin; {run['windows']} windows of {run['workers']} connections for"
        f" {run['window_seconds']} s, rotating order (the change rows are folded every"
        f" {run['fold_every_lives']} serial lives and every {run['fold_seconds']} s"
        " concurrently, inside the measured figures):",
        "",
        "| figure | " + " | ".join(heads[v] for v in kept) + " | off |",
        "|---|" + "---:|" * (len(kept) + 1),
    ]
    for label, key in (("backend CPU per life (ms)", "cpu_ms"), ("wall per life (ms)", "wall_ms")):
        cells = " | ".join(str(serial[v][key]) for v in (*kept, "off"))
        lines.append(f"| PostgreSQL {label} | {cells} |")
    cells = " | ".join(str(rates[v]) for v in (*kept, "off"))
    lines.append(f"| lives per second, 64 connections (median) | {cells} |")
    for label, key in (
        ("CPU per life ÷ off", "backend CPU per life"),
        ("wall per life ÷ off", "wall per serial life"),
        (
            "lives/s at 64 ÷ off (median of per-round ratios)",
            "lives per s at c=64 (median of per-round ratios)",
        ),
    ):
        lines.append(f"| {label} | " + " | ".join(str(ratios[v][key]) for v in kept) + " | 1 |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["fill", "migrate", "time", "write", "table"])
    parser.add_argument("files", nargs="*", type=Path, help="`table`: the runs' JSON files")
    parser.add_argument("--home", type=Path, default=Path("/tmp/wl-readside"))
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--events-per-unit", type=int, default=10)
    parser.add_argument("--through", type=int, default=10_000, help="last migration applied")
    parser.add_argument("--label", default="run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--windows", type=int, default=6, help="`write`: concurrent windows")
    parser.add_argument(
        "--variants", help="`write`: the schemas to compare, e.g. 0023,0027 (default: all)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.step == "table":
        runs = [json.loads(p.read_text()) for p in args.files]
        text = markdown(runs)
        out = args.out or RESULTS / f"readside-{dt.date.today():%Y%m%d}.md"
        out.write_text(text)
        print(text)
        return
    url = server_url(args.home)
    if args.step == "fill":
        result = asyncio.run(
            fill(url, units=args.units, events_per_unit=args.events_per_unit, through=args.through)
        )
    elif args.step == "migrate":
        result = asyncio.run(migrate(url))
    elif args.step == "write":
        from bench.readside_write import measure_write

        only = args.variants.split(",") if args.variants else None
        result = asyncio.run(measure_write(url, windows=args.windows, only=only))
    else:
        result = asyncio.run(time_reads(url, label=args.label, reps=args.reps))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"readside-{args.step}-{args.label}-{stamp}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(
        json.dumps({k: v for k, v in result.items() if k != "report_output"}, indent=2, default=str)
    )


if __name__ == "__main__":
    main()
