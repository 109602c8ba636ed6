"""PostgreSQL CPU per statement, the product's against the hand-written twin (not part of
run.py; a throwaway server). Each kind has a connection (so a backend) of its own; the
kinds take turns in batches on one database, and the CPU their backends used (from
/proc, so the server must run on this machine) is summed over the batches after the first.

    uv run --group bench python bench/statement_cpu.py [--step claim|start] [--rounds 20]

`--step claim`: the hand-written claim (bench/raw.sql `ledger_claim`), `claim_unit`, and
`claim_next_unit` (what Ledger.claim runs first). `--step start`: each kind's claim then,
timed, its start: `ledger_finish`, `transition_unit` (how the service started before
`start_unit`), `start_unit`. One connection per kind, one claim at a time: this measures
the statement, not the queueing of many.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from claims import LEASE_SECONDS, RAW, seed_ledger
from harness import Server, load_average, start_embedded

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


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step", choices=["claim", "start"], default="claim")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--batch", type=int, default=100)
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
