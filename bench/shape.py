"""DESIGN §12's costs (`shape`) and registration with requirement edges over HTTP
(`register`, issue 28); what each measures: docs/work-shape.md#measured.

    uv run --group bench python -m bench.shape [--units 1000000] [--claims 2000] [--rounds 3]
    uv run --group bench python -m bench.shape register [--units 100000] [--rounds 3]

Kinds alternate within each round. `shape` seeds with triggers off (as a restore does) and
measures the ledger's own statements, triggers on. `register` posts batches of 1,000 units
of each kind: *flat* (no `requires`) and *edges* (chains of ten, each head requiring one of
1,000 unfinished libraries: every unit registered `waiting`).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import datetime as dt
import json
import os
import shutil
import statistics
import tempfile
import time
from argparse import RawTextHelpFormatter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from bench.harness import MiniHttp, app_process, mint_token, recreated, server_url
from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("bench-operator", privileged=True)
EVIDENCE = "https://ci.example/bench"

SEED_UNITS = """
INSERT INTO work_units (external_ref, fleet, domain, created_at, state)
SELECT 'u' || i, 'fleet-a', 'd' || (i % 8), clock_timestamp(), 'ready'
FROM generate_series(1, $1) AS i
"""
# Libraries, finished: what the edges point at, so the dependents stay ready.
SEED_LIBS = """
INSERT INTO work_units (external_ref, fleet, domain, state, disposition, disposed_at)
SELECT 'lib' || i, 'fleet-a', 'libs', 'done', 'MIGRATED', now()
FROM generate_series(1, $1) AS i
"""
# Each unit requires one of the 1,000 libraries (fan-ins of units / 1000 each): as many
# edges as units, every unit still ready.
SEED_EDGES = """
INSERT INTO unit_requirements (unit_id, prerequisite_id)
SELECT u.id, l.id
FROM (SELECT id, substr(external_ref, 2)::int AS n FROM work_units
      WHERE external_ref LIKE 'u%') AS u
JOIN work_units AS l ON l.external_ref = 'lib' || (1 + u.n % 1000)
"""


# 998 budgets of other fleets, and a fleet-wide and a domain budget over the claimed fleet.
SEED_BUDGETS = """
INSERT INTO budgets (fleet, domain, cap_cents)
SELECT 'other-' || i, NULL, 100 FROM generate_series(1, 998) AS i
UNION ALL VALUES ('fleet-a', NULL, 1000000000), ('fleet-a', 'd1', 1000000000)
"""


async def _seed(url: str, units: int, edges: bool) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(SEED_UNITS, units)
        if edges:
            await conn.execute(SEED_LIBS, 1000)
            await conn.execute(SEED_EDGES)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def _claims(ledger: Ledger, tag: str, count: int) -> float:
    """Median seconds of `count` pull-next claims, each by a new agent."""
    times = []
    for i in range(count):
        start = time.perf_counter()
        claim = await ledger.claim(f"{tag}-{i}")
        times.append(time.perf_counter() - start)
        assert claim.unit is not None
    return statistics.median(times)


async def _finish_time(ledger: Ledger, tag: str, dependents: int) -> float:
    lib = f"{tag}-lib"
    units = [NewUnit(lib, "fleet-b", "fin")]
    units += [NewUnit(f"{tag}-d{i}", "fleet-b", "deps", requires=(lib,)) for i in range(dependents)]
    for batch in range(0, len(units), 1000):
        await ledger.register(units[batch : batch + 1000], OPERATOR)
    agent = Actor(f"{tag}-agent")
    await ledger.claim_named(lib, agent.name)
    await ledger.start(lib, agent)
    await ledger.verify(lib, agent, EVIDENCE)
    start = time.perf_counter()
    await ledger.dispose(lib, Disposition.MIGRATED, agent)
    return time.perf_counter() - start


async def alternating(rounds: int, kinds: dict[str, Callable[[int], Awaitable[float]]]) -> Any:
    """Each kind's median ms over `rounds`, the kinds' order swapped every round."""
    figures: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in list(kinds)[:: 1 if r % 2 == 0 else -1]:
            figures[kind].append(await kinds[kind](r))
    medians = {k: round(statistics.median(v) * 1e3, 3) for k, v in figures.items()}
    first, second = medians.values()
    print(f"{medians} ms, ratio {second / first:.3f}")
    return medians


async def shape(args: argparse.Namespace) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-shape-"))
    atexit.register(shutil.rmtree, home, True)  # after the embedded server has stopped
    admin, ledgers = server_url(home), {}
    for name, edges in (("flat", False), ("edges", True)):
        url = await recreated(admin, f"bench_shape_{name}")
        await migrate_database(url)
        started = time.perf_counter()
        await _seed(url, args.units, edges)
        print(f"seeded {name}: {args.units} units in {time.perf_counter() - started:.0f} s")
        ledgers[name] = Ledger(
            Store(await create_pool(url, min_size=1, max_size=2)), lease_seconds=3600
        )
    flat, edged, n = ledgers["flat"], ledgers["edges"], args.claims
    print("pull-next p50, without edges and with one per unit:")
    kinds = {"flat": lambda r: _claims(flat, f"flat-{r}", n),
             "edges": lambda r: _claims(edged, f"edges-{r}", n)}  # fmt: skip
    await alternating(args.rounds, kinds)
    print("finishing a unit, with none and with 1,000 dependents:")
    kinds = {"alone": lambda r: _finish_time(flat, f"alone{r}", 0),
             "fan": lambda r: _finish_time(flat, f"fan{r}", 1000)}  # fmt: skip
    await alternating(args.rounds, kinds)

    async def budgeted(r: int) -> float:
        await flat.store.pool.execute(SEED_BUDGETS)
        try:
            return await _claims(flat, f"b1000-{r}", n)
        finally:
            await flat.store.pool.execute("DELETE FROM budgets")

    print("pull-next p50, without budgets and with 1,000 (2 over the fleet):")
    await alternating(
        args.rounds, {"none": lambda r: _claims(flat, f"b0-{r}", n), "1000": budgeted}
    )


BATCH = 1000
LIBS = 1000
CHAIN = 10


def flat_batch(tag: str) -> list[dict[str, Any]]:
    return [{"external_ref": f"{tag}-{i}", "fleet": "f", "domain": "flat"} for i in range(BATCH)]


def edged_batch(tag: str, lib: int) -> list[dict[str, Any]]:
    units = []
    for i in range(BATCH):
        head = i % CHAIN == 0
        requires = [f"lib-{(lib + i // CHAIN) % LIBS}"] if head else [f"{tag}-{i - 1}"]
        units.append(
            {"external_ref": f"{tag}-{i}", "fleet": "f", "domain": "edges", "requires": requires}
        )
    return units


async def post_batch(http: MiniHttp, units: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    answer = await http.post("/units", {"units": units})
    elapsed = time.perf_counter() - start
    created = answer["created"]
    if created != len(units):
        raise RuntimeError(f"POST /units created {created} of {len(units)}: {answer}")
    return elapsed


async def one_round(http: MiniHttp, r: int, units: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"flat": [], "edges": []}
    for b in range(units // BATCH):
        kinds = ("flat", "edges") if (b + r) % 2 == 0 else ("edges", "flat")
        for kind in kinds:
            tag = f"r{r}-{kind}-b{b}"
            batch = flat_batch(tag) if kind == "flat" else edged_batch(tag, b * 100)
            times[kind].append(await post_batch(http, batch))
    per_s = {k: len(v) * BATCH / sum(v) for k, v in times.items()}
    return {
        "units_per_s": {k: round(v) for k, v in per_s.items()},
        "batch_p50_ms": {k: round(statistics.median(v) * 1e3, 1) for k, v in times.items()},
        "ratio": round(per_s["edges"] / per_s["flat"], 3),
        "load_average_end": os.getloadavg(),
    }


async def register(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-register-"))
    # Registered before the server starts, so it runs after the server has stopped.
    atexit.register(shutil.rmtree, home, True)
    url = await recreated(server_url(home / "pg"), "bench_register")
    await migrate_database(url)
    token = await mint_token(url, home, "operator", "bench-operator")
    result: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "units": args.units,
        "load_average_start": os.getloadavg(),
        "rounds": [],
    }
    async with app_process("serve", url, home) as app:
        http = await MiniHttp.open(app.port, token)
        try:
            libs = [
                {"external_ref": f"lib-{i}", "fleet": "f", "domain": "libs"} for i in range(LIBS)
            ]
            await post_batch(http, libs)
            for r in range(args.rounds):
                row = await one_round(http, r, args.units)
                result["rounds"].append(row)
                print(f"round {r + 1}: {json.dumps(row)}", flush=True)
        finally:
            await http.close()
    rounds = result["rounds"]
    result["median"] = {
        "flat_units_per_s": statistics.median(x["units_per_s"]["flat"] for x in rounds),
        "edges_units_per_s": statistics.median(x["units_per_s"]["edges"] for x in rounds),
        "ratio": statistics.median(x["ratio"] for x in rounds),
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=RawTextHelpFormatter)
    parser.add_argument("program", nargs="?", choices=["shape", "register"], default="shape")
    parser.add_argument("--units", type=int, help="default 1,000,000; register: 100,000 a kind")
    parser.add_argument("--claims", type=int, default=2000, help="pull-next claims a window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    if args.program == "shape":
        args.units = args.units or 1_000_000
        asyncio.run(shape(args))
    else:
        args.units = args.units or 100_000
        outcome = asyncio.run(register(args))
        print(json.dumps(outcome["median"]))
        stamp = outcome["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
        path = Path(args.out) / f"register-{stamp}.json"
        path.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
        print(f"raw results: {path}")
