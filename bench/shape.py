"""DESIGN §12's costs on one PostgreSQL (`--sections shape`), and registration with
requirement edges over HTTP (`register`, issue 28: `--sections register`).

    uv run --group bench python -m bench.shape [--units 1000000] [--claims 2000] [--rounds 3]
    uv run --group bench python -m bench.shape register [--units 100000] [--rounds 3]

`shape`, in alternating windows: pull-next p50 over `--units` units with as many requirement
edges (fan-ins onto 1,000 finished libraries: every unit stays ready) against none;
finishing a unit with 1,000 waiting dependents against none; pull-next with 1,000 budgets
(one over the claimed fleet) against none. Seeding writes rows with triggers off (as a
restore does); everything measured runs the ledger's own statements, triggers on.

`register`: each round registers `--units` units of each kind through `POST /units` in
batches of 1,000, the kinds alternating batch by batch: *flat* (no `requires`) and *edges*
(chains of ten within a batch, each head requiring one of 1,000 unfinished libraries, so
every unit is registered `waiting`: the cycle check, the unknown-ref check and the edge
rows all run). Units per second of each kind, the ratio edges ÷ flat, medians of rounds.
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
import sys
import tempfile
import time
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


async def _ledger(url: str) -> tuple[Ledger, asyncpg.Pool]:
    pool = await create_pool(url, min_size=1, max_size=2)
    return Ledger(Store(pool), lease_seconds=3600), pool


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
    units = [NewUnit(lib, "fleet-b", "fin")] + [
        NewUnit(f"{tag}-dep{i}", "fleet-b", "fin-deps", requires=(lib,)) for i in range(dependents)
    ]
    for batch in range(0, len(units), 1000):
        await ledger.register(units[batch : batch + 1000], OPERATOR)
    agent = Actor(f"{tag}-agent")
    await ledger.claim_named(lib, agent.name)
    await ledger.start(lib, agent)
    await ledger.verify(lib, agent, EVIDENCE)
    start = time.perf_counter()
    await ledger.dispose(lib, Disposition.MIGRATED, agent)
    return time.perf_counter() - start


async def main(units: int, claims: int, rounds: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-shape-"))
    atexit.register(shutil.rmtree, home, True)  # after the embedded server has stopped
    admin = server_url(home)
    urls = {}
    for name, edges in (("flat", False), ("edges", True)):
        urls[name] = await recreated(admin, f"bench_shape_{name}")
        await migrate_database(urls[name])
        started = time.perf_counter()
        await _seed(urls[name], units, edges)
        print(
            f"seeded {name}: {units} units, edges={edges} in {time.perf_counter() - started:.0f} s"
        )
    flat, flat_pool = await _ledger(urls["flat"])
    edged, edged_pool = await _ledger(urls["edges"])
    figures: dict[str, list[float]] = {"flat": [], "edges": []}
    for r in range(rounds):
        order = (
            [("flat", flat), ("edges", edged)] if r % 2 == 0 else [("edges", edged), ("flat", flat)]
        )
        for name, ledger in order:
            figures[name].append(await _claims(ledger, f"{name}-{r}", claims))
    flat_p50, edges_p50 = statistics.median(figures["flat"]), statistics.median(figures["edges"])
    print(
        f"pull-next p50: without edges {flat_p50 * 1e3:.3f} ms, with {units} edges "
        f"{edges_p50 * 1e3:.3f} ms, ratio {edges_p50 / flat_p50:.3f}"
    )

    fan = [await _finish_time(flat, f"fan{r}", 1000) for r in range(rounds)]
    alone = [await _finish_time(flat, f"alone{r}", 0) for r in range(rounds)]
    print(
        f"finishing a unit: with 1000 dependents {statistics.median(fan) * 1e3:.1f} ms, "
        f"with none {statistics.median(alone) * 1e3:.1f} ms"
    )

    conn = await asyncpg.connect(urls["flat"])
    budgets: dict[str, list[float]] = {"none": [], "1000": []}
    try:
        for r in range(rounds):
            for name in ("none", "1000") if r % 2 == 0 else ("1000", "none"):
                if name == "1000":
                    await conn.execute(SEED_BUDGETS)
                budgets[name].append(await _claims(flat, f"b{name}-{r}", claims))
                await conn.execute("DELETE FROM budgets")
    finally:
        await conn.close()
    none_p50, many_p50 = statistics.median(budgets["none"]), statistics.median(budgets["1000"])
    print(
        f"pull-next p50: {none_p50 * 1e3:.3f} ms without a budget over the fleet, "
        f"{many_p50 * 1e3:.3f} ms with 1000 budgets (2 over it), ratio {many_p50 / none_p50:.3f}"
    )
    await flat_pool.close()
    await edged_pool.close()


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
        http = await MiniHttp(app.port, token).open()
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


def register_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="registration with and without edges")
    parser.add_argument("--units", type=int, default=100_000, help="units of each kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    arguments = parser.parse_args(argv)
    outcome = asyncio.run(register(arguments))
    print(json.dumps(outcome["median"]))
    stamp = outcome["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = Path(arguments.out) / f"register-{stamp}.json"
    path.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
    print(f"raw results: {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["register"]:
        register_main(sys.argv[2:])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.units, args.claims, args.rounds))
