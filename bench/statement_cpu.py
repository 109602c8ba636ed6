"""PostgreSQL CPU per statement, the product's against the hand-written twin (not part of
run.py; a throwaway server). Each kind has a connection (so a backend) of its own; the
kinds take turns in batches on one database, and the CPU their backends used (from
/proc, so the server must run on this machine) is summed over the batches after the first.

    uv run --group bench python -m bench.statement_cpu [--step claim|start|life] [--rounds 20]
        [--batch 100] [--workers 1]

`--step claim`: the hand-written claim (bench/raw.sql `ledger_claim`), `claim_unit`, and
`claim_next_unit` (what Ledger.claim runs first). `--step start`: each kind's claim then,
timed, its start: `ledger_finish`, `transition_unit` (how the service started before
`start_unit`), `start_unit`. `--step life`: the five steps of the claims section's life,
each timed on its own, the hand-written statements (`raw_ledger_life`) against the
product's (`ledger_sql_life`: what Ledger runs). One connection per kind, one statement at
a time: this measures the statement, not the queueing of many. With `--workers N`, N
connections per kind run each step at once (the batch shared among them), their backends'
CPU summed: the statements' cost when they contend, as in the claims section at c=N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.claims import EVIDENCE, LEASE_SECONDS, NO_COST_DETAIL, RAW, seed_ledger
from bench.harness import Server, load_average, start_embedded
from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES

CLAIMS = {
    "hand-written": lambda a: (RAW["ledger_claim"], (a, LEASE_SECONDS)),
    "claim_unit": lambda a: (QUERIES["claim_unit"], (a, None, LEASE_SECONDS, None)),
    "claim_next_unit": lambda a: (QUERIES["claim_next_unit"], (a, None, LEASE_SECONDS)),
}


# What each kind runs to start its claimed unit.
STARTS = {
    "hand-written": "hand-written (ledger_finish)",
    "claim_unit": "transition_unit",
    "claim_next_unit": "start_unit",
}


def _start(kind: str, agent: str, row: Any) -> tuple[str, tuple[Any, ...]]:
    if kind == "hand-written":
        return RAW["ledger_finish"], (row["unit_id"], row["attempt_id"], agent)
    unit, attempt = row["unit"]["id"], row["attempt"]["id"]
    if kind == "claim_unit":
        leaving, event = ["claimed"], "transitioned"
        args = (unit, "in_progress", leaving, agent, attempt, None, None, event, {}, agent)
        return QUERIES["transition_unit"], args
    return QUERIES["start_unit"], (unit, ["claimed"], agent, attempt, agent)


# --step life: per kind, each step's statement and arguments from (agent, unit, attempt).
Step = Callable[[str, Any, Any], tuple[str, tuple[Any, ...]]]
LIFE: dict[str, dict[str, Step]] = {
    "hand-written": {
        "claim": lambda a, u, t: (RAW["ledger_claim"], (a, LEASE_SECONDS)),
        "start": lambda a, u, t: (RAW["ledger_finish"], (u, t, a)),
        "cost": lambda a, u, t: (RAW["ledger_cost"], (t, a, 125)),
        "verify": lambda a, u, t: (RAW["ledger_verify"], (u, t, a, EVIDENCE)),
        "dispose": lambda a, u, t: (RAW["ledger_dispose"], (u, t, a)),
    },
    "product": {
        "claim": lambda a, u, t: (QUERIES["claim_next_unit"], (a, None, LEASE_SECONDS)),
        "start": lambda a, u, t: (QUERIES["start_unit"], (u, ["claimed"], a, t, a)),
        "cost": lambda a, u, t: (QUERIES["record_cost"], (t, 125, a, a, *NO_COST_DETAIL)),
        "verify": lambda a, u, t: (
            QUERIES["verify_unit"],
            (u, ["in_progress"], a, t, EVIDENCE, {}, a),
        ),
        "dispose": lambda a, u, t: (QUERIES["dispose_verified_unit"], (u, a, t, None, None, a)),
    },
}


def _ids(row: Any) -> tuple[Any, Any]:
    if "unit_id" in row:  # the hand-written claim
        return row["unit_id"], row["attempt_id"]
    return row["unit"]["id"], row["attempt"]["id"]


async def _life(url: str, rounds: int, batch: int, workers: int) -> None:
    """Server CPU per step of the life: each step run for a batch of units at a time, by
    `workers` connections at once (each taking its share of the batch in turn)."""
    conns = {kind: [await connect(url) for _ in range(workers)] for kind in LIFE}
    pids = {
        kind: [await conn.fetchval("SELECT pg_backend_pid()") for conn in kind_conns]
        for kind, kind_conns in conns.items()
    }
    used = {kind: dict.fromkeys(LIFE[kind], 0.0) for kind in LIFE}

    async def run_step(conn: Any, step: Step, name: str, lives: list[list[Any]]) -> None:
        for life in lives:
            statement, values = step(*life)
            row = await conn.fetchrow(statement, *values)
            if name == "claim":
                assert row is not None
                life[1], life[2] = _ids(row)

    for round_no in range(rounds):
        for kind, steps in LIFE.items():
            lives = [[f"{kind}-{uuid.uuid4().hex[:8]}", None, None] for _ in range(batch)]
            shares = [lives[w::workers] for w in range(workers)]
            for name, step in steps.items():
                before = sum(_cpu_seconds(pid) for pid in pids[kind])
                pairs = zip(conns[kind], shares, strict=True)
                await asyncio.gather(*(run_step(c, step, name, share) for c, share in pairs))
                if round_no > 0:  # the first round prepares and warms up
                    used[kind][name] += sum(_cpu_seconds(pid) for pid in pids[kind]) - before
    for kind_conns in conns.values():
        for conn in kind_conns:
            await conn.close()
    n = batch * (rounds - 1)
    hand, product = used["hand-written"], used["product"]
    print(f"\n{workers} connection(s) per kind")
    print("\n| life step | hand-written ms | product ms | hand-written ÷ product |")
    print("|---|---:|---:|---:|")
    for name in (*hand, "total"):
        h = sum(hand.values()) if name == "total" else hand[name]
        q = sum(product.values()) if name == "total" else product[name]
        print(f"| {name} | {1000 * h / n:.3f} | {1000 * q / n:.3f} | {h / q:.2f} |")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step", choices=["claim", "start", "life"], default="claim")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument(
        "--workers", type=int, default=1, help="--step life: connections per kind at once"
    )
    args = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="wl-stmt-cpu-"))
    try:
        server = await Server.attach(start_embedded(home))
        await server.migrated_database("stmt_tpl")
        print(f"load average at start: {load_average()}")
        async with server.fresh_database("stmt", "stmt_tpl") as url:
            seed = await connect(url)
            await seed_ledger(seed, len(CLAIMS) * args.batch * args.rounds + 1000)
            await seed.close()
            if args.step == "life":
                await _life(url, args.rounds, args.batch, args.workers)
                print(f"load average at end: {load_average()}")
                return
            conns = {k: await connect(url) for k in CLAIMS}
            pids = {k: await c.fetchval("SELECT pg_backend_pid()") for k, c in conns.items()}
            used = dict.fromkeys(CLAIMS, 0.0)
            for round_no in range(args.rounds):
                for kind, claim in CLAIMS.items():
                    conn, pid = conns[kind], pids[kind]
                    starts = []
                    before = _cpu_seconds(pid)
                    for _ in range(args.batch):
                        agent = f"{kind}-{uuid.uuid4().hex[:8]}"
                        statement, values = claim(agent)
                        row = await conn.fetchrow(statement, *values)
                        assert row is not None, kind
                        starts.append(_start(kind, agent, row))
                    if args.step == "start":
                        before = _cpu_seconds(pid)
                        for statement, values in starts:
                            status = await conn.execute(statement, *values)
                            assert status.endswith(" 1"), (kind, status)
                    if round_no > 0:  # the first round prepares and warms up
                        used[kind] += _cpu_seconds(pid) - before
            for conn in conns.values():
                await conn.close()
        n = args.batch * (args.rounds - 1)
        print(f"load average at end: {load_average()}")
        print(f"\n| {args.step} statement | server CPU ms each | hand-written ÷ this |")
        print("|---|---:|---:|")
        for kind, seconds in used.items():
            ratio = used["hand-written"] / seconds
            name = STARTS[kind] if args.step == "start" else kind
            print(f"| {name} | {1000 * seconds / n:.3f} | {ratio:.2f} |")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
