"""Client CPU per claim: a raw connection, asyncpg's Pool, the ledger's pool, and
`Ledger.claim` over each pool (not part of run.py; a throwaway server).

    uv run --group bench python bench/pool_cost.py [--items 6000] [--c 16] [--passes 2]

`c` workers each claim in a loop (`claim_next_unit`, db/sql/units.sql, a fresh agent per
claim); each pool holds `c` connections, so no worker waits for one and what differs is
only what each way of running the statement costs this process. Client CPU is this
process's own (`getrusage`) divided by the claims made; PostgreSQL's work is the same
statement every time and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
import uvloop
from claims import LEASE_SECONDS, seed_ledger
from harness import Server, start_embedded

from work_ledger.db.connect import _init_connection, connect, create_pool
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store
from work_ledger.service.ledger import Ledger

CLAIM = QUERIES["claim_next_unit"]
# One fresh agent per claim across the whole run: an agent still holding a unit would be
# answered `full` by the claim statement, which claims nothing.
_AGENTS = (f"agent-{n}" for n in itertools.count())


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _timed(label: str, claim: Callable[[str], Awaitable[Any]], items: int, c: int) -> None:
    cpu, wall = _cpu(), time.perf_counter()

    async def worker() -> None:
        for _ in range(items // c):
            await claim(next(_AGENTS))

    await asyncio.gather(*(worker() for _ in range(c)))
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    print(f"{label:38s} {1e6 * cpu / items:6.1f} µs client CPU per claim, {items / wall:5.0f}/s")


async def _asyncpg_pool(url: str, size: int) -> asyncpg.Pool:
    async def keep_session(_conn: asyncpg.Connection) -> None:
        """No reset query: the same round trips as the ledger's pool."""

    pool = await asyncpg.create_pool(
        url, min_size=size, max_size=size, init=_init_connection, reset=keep_session
    )
    assert pool is not None
    return pool


async def main(args: argparse.Namespace) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-pool-cost-"))
    try:
        server = await Server.attach(start_embedded(home))
        url = await server.migrated_database("pool_cost")
        seed = await connect(url)
        await seed_ledger(seed, args.items * 5 * args.passes + 1000)
        await seed.close()

        raw = [await connect(url) for _ in range(args.c)]
        theirs = await _asyncpg_pool(url, args.c)
        ours = await create_pool(url, min_size=args.c, max_size=args.c)
        on_theirs = Ledger(Store(theirs), lease_seconds=LEASE_SECONDS)  # the same calls
        on_ours = Ledger(Store(ours), lease_seconds=LEASE_SECONDS)
        free = list(raw)

        async def on_raw(agent: str) -> Any:
            conn = free.pop()  # one each: c workers, c connections
            try:
                return await conn.fetchrow(CLAIM, agent, None, LEASE_SECONDS)
            finally:
                free.append(conn)

        ways: list[tuple[str, Callable[[str], Awaitable[Any]]]] = [
            ("a raw connection per worker", on_raw),
            ("asyncpg's Pool", lambda a: theirs.fetchrow(CLAIM, a, None, LEASE_SECONDS)),
            (
                "the ledger's pool (db/pool.py)",
                lambda a: ours.fetchrow(CLAIM, a, None, LEASE_SECONDS),
            ),
            ("Ledger.claim over asyncpg's Pool", on_theirs.claim),
            ("Ledger.claim over the ledger's pool", on_ours.claim),
        ]
        for pass_no in range(args.passes):
            print(f"pass {pass_no + 1}")
            for label, claim in ways:
                await _timed(label, claim, args.items, args.c)
        await theirs.close()
        await ours.close()
        for conn in raw:
            await conn.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--items", type=int, default=6000, help="claims per figure")
    p.add_argument("--c", type=int, default=16, help="workers (and connections per pool)")
    p.add_argument("--passes", type=int, default=2)
    uvloop.run(main(p.parse_args()))
