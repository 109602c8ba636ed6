"""100,000 units registered through `POST /units` with requirement edges, against 100,000
without, side by side on one `work-ledger serve` and one embedded PostgreSQL (issue 28).

    uv run --group bench python -m bench.register [--units 100000] [--rounds 3] [--out DIR]

Each round registers `--units` units of each kind in batches of 1,000 (the largest batch
`POST /units` takes), the two kinds alternating batch by batch (which goes first swaps
every batch), so both see the same machine and a table of the same size:
- *flat*: no `requires`;
- *edges*: one requirement per unit, 1,000 edges a batch: chains of ten within the batch
  (each unit requires the one before it, by external_ref in the same batch), each chain's
  head requiring one of 1,000 libraries registered before the first round (fan-ins of
  100 per round). The libraries are not finished, so every such unit is registered
  `waiting`; the cycle check, the unknown-ref check and the edge rows all run.
The figure is units per second of each kind per round (the sum of its batches' request
times), the ratio edges ÷ flat per round, and the medians over the rounds; batch p50s too.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import datetime as dt
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import load_average, recreated, server_url
from bench.httpbench import MiniHttp, app_process, mint_token
from work_ledger.runtime import migrate_database

HERE = Path(__file__).resolve().parent
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
        "load_average_end": load_average(),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-register-"))
    # Registered before the server starts, so it runs after the server has stopped.
    atexit.register(shutil.rmtree, home, True)
    url = await recreated(server_url(home / "pg"), "bench_register")
    await migrate_database(url)
    token = await mint_token(url, home, "operator", "bench-operator")
    result: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "units": args.units,
        "load_average_start": load_average(),
        "rounds": [],
    }
    async with app_process("serve", url, home) as app:
        http = MiniHttp(app.port, {"Authorization": f"Bearer {token}"})
        await http.open()
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000, help="units of each kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results"))
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    print(json.dumps(outcome["median"]))
    stamp = outcome["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = Path(arguments.out) / f"register-{stamp}.json"
    path.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
    print(f"raw results: {path}")
