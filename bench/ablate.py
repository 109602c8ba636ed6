"""Where the product's claim statement spends its PostgreSQL CPU: the same statement with one
branch taken out at a time (not part of run.py; a throwaway database per window).

    uv run --group bench python bench/ablate.py [--concurrency 1,16] [--reps 2] [--out FILE]

Each variant is `claim_unit` (db/sql/units.sql) with one of its CTEs removed (or, the last,
the same claim as a PL/pgSQL function: bench/claim_function.sql), run as the
claims section's `ledger_sql_claim` runs it (a raw connection per worker, a new agent per
item, pull-next with no domain), interleaved with the hand-written ledger-shaped claim.
The gap a removal closes is what that branch costs. The cuts are not correct claims: they
measure, they do not propose. The PL/pgSQL function is a candidate meant to be correct, not
(yet) covered by the product's tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
from claims import LEASE_SECONDS, RAW, connections, seed_ledger
from harness import Operation, Server, load_average, measure, median_of, start_embedded

from work_ledger.db.queries import QUERIES

PRODUCT = QUERIES["claim_unit"]
BACKLOG = 40_000


def _cut(sql: str, start: str, end: str) -> str:
    """Remove the text from `start` up to (not including) `end`."""
    i = sql.index(start)
    j = sql.index(end, i)
    return sql[:i] + sql[j:]


def _sub(sql: str, old: str, new: str) -> str:
    assert old in sql, old
    return sql.replace(old, new)


def no_resume(sql: str) -> str:
    sql = _cut(sql, "), resumed AS (", ")\nSELECT c.unit")
    return sql[: sql.index("UNION ALL\nSELECT unit, attempt")].rstrip() + ";"


def no_lapsed(sql: str) -> str:
    sql = _cut(sql, "), lapsed AS (", "), fresh AS (")
    sql = _sub(sql, " AND NOT EXISTS (SELECT 1 FROM lapsed)", "")
    return _sub(sql, "    UNION ALL SELECT * FROM lapsed\n", "")


def no_named(sql: str) -> str:
    sql = _cut(
        sql, "), named AS (", "), lapsed AS (" if "), lapsed AS (" in sql else "), fresh AS ("
    )
    return _sub(sql, "SELECT * FROM named\n    UNION ALL SELECT", "SELECT")


def no_held(sql: str) -> str:
    i = sql.index("WITH held AS (")
    sql = sql[:i] + "WITH " + sql[sql.index("\n), ", i) + 4 :]
    sql = sql.replace("\n      AND NOT EXISTS (SELECT 1 FROM held)\n", "\n")
    sql = sql.replace(
        "      AND NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS", "      AND NOT EXISTS"
    )
    assert "FROM held" not in sql
    return sql


def no_superseded(sql: str) -> str:
    sql = _cut(sql, "), superseded AS (", "), attempt AS (")
    sql = _sub(
        sql,
        "FROM claimed AS c, (SELECT array_agg(id) AS ids FROM superseded) AS s",
        "FROM claimed AS c",
    )
    return _sub(
        sql,
        "(SELECT array_agg(id) FROM superseded) AS superseded_ids",
        "NULL::uuid[] AS superseded_ids",
    )


def superseded_by_probe(sql: str) -> str:
    """Not a cut: `superseded` looks up the claimed unit's live attempt through a scalar
    subquery (an InitPlan, so an index probe of one_live_attempt_per_unit in any plan)."""
    sql = _sub(
        sql,
        "    FROM claimed AS c\n    WHERE a.unit_id = (c.unit).id AND a.outcome IS NULL",
        "    WHERE a.unit_id = (SELECT (c.unit).id FROM claimed AS c) AND a.outcome IS NULL",
    )
    return sql


def no_fresh_in_domain(sql: str) -> str:
    sql = _cut(sql, "), fresh_in_domain AS (", "), picked AS (")
    return _sub(sql, "    UNION ALL SELECT * FROM fresh_in_domain\n", "")


def pull_next_only(sql: str) -> str:
    for cut in (no_resume, no_superseded, no_fresh_in_domain, no_lapsed, no_named, no_held):
        sql = cut(sql)
    return sql


VARIANTS: dict[str, Callable[[str], str] | None] = {
    "raw_ledger_claim": None,
    "claim_unit": lambda s: s,
    "without resumed*": no_resume,
    "without lapsed": no_lapsed,
    "without named": no_named,
    "without held": no_held,
    "without superseded": no_superseded,
    "without fresh_in_domain": no_fresh_in_domain,
    "only fresh (all six cut)": pull_next_only,
    "superseded by scalar probe": superseded_by_probe,
    # Not a cut: the candidate in claim_function.sql, installed in the template database.
    "claim as a PL/pgSQL function": lambda _: "SELECT * FROM wl_claim($1, $2, $3, $4)",
}
CLAIM_FUNCTION = Path(__file__).with_name("claim_function.sql")


@contextlib.asynccontextmanager
async def workers(url: str, c: int, statement: str | None) -> AsyncIterator[list[Operation]]:
    run = uuid.uuid4().hex[:6]
    async with connections(url, c) as conns:

        def op_for(i: int, conn: asyncpg.Connection) -> Operation:
            counter = itertools.count()

            async def op() -> float | None:
                agent = f"agent-{run}-{i}-{next(counter)}"
                t0 = time.perf_counter()
                if statement is None:
                    row = await conn.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
                else:
                    row = await conn.fetchrow(statement, agent, None, LEASE_SECONDS, None)
                return None if row is None else time.perf_counter() - t0

            return op

        yield [op_for(i, conn) for i, conn in enumerate(conns)]


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--out", default="")
    p.add_argument("--variants", default="", help="comma-separated subset (default all)")
    args = p.parse_args()
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()] or list(VARIANTS)
    statements = {
        k: (None if f is None else f(PRODUCT)) for k, f in VARIANTS.items() if k in chosen
    }
    home = Path(tempfile.mkdtemp(prefix="wl-ablate-"))
    try:
        server = await Server.attach(start_embedded(home))
        template = await asyncpg.connect(await server.migrated_database("ablate_tpl"))
        await template.execute(CLAIM_FUNCTION.read_text())
        await template.close()
        out: dict[str, Any] = {"load_average_start": load_average(), "rows": {}}
        samples: dict[str, list[dict[str, Any]]] = {}
        for rep in range(args.reps):
            for c in (int(x) for x in args.concurrency.split(",")):
                for name, statement in statements.items():
                    async with server.fresh_database("ablate", "ablate_tpl") as url:
                        seed = await asyncpg.connect(url)
                        await seed_ledger(seed, BACKLOG)
                        await seed.close()
                        async with workers(url, c, statement) as ops:
                            s = (
                                await measure(
                                    ops, server=server, warmup=args.warmup, duration=args.duration
                                )
                            ).summary()
                    samples.setdefault(f"{name}|{c}", []).append(s)
                    print(
                        f"rep {rep + 1} c={c:<3} {name:<26} {s['items_per_s']:7.0f}/s "
                        f"server {s['server_cpu_ms_per_item']:.3f} ms/item "
                        f"other {s['other_cpu_pct']}%",
                        flush=True,
                    )
        out["load_average_end"] = load_average()
        print(
            "\n| variant | c | items/s | server CPU ms/claim | client CPU ms/claim | claim p50 ms |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for key, rows in samples.items():
            m = median_of(rows)
            out["rows"][key] = m
            name, c = key.split("|")
            print(
                f"| {name} | {c} | {m['items_per_s']:,.0f} | {m['server_cpu_ms_per_item']:.3f} "
                f"| {m['client_cpu_ms_per_item']:.3f} | {m['claim_p50_ms']:.2f} |"
            )
        if args.out:
            text = json.dumps(out, indent=1, default=str)
            await asyncio.to_thread(Path(args.out).write_text, text)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
