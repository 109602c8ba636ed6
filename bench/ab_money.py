"""Issue 29's two speed goals as same-round ratios on one `work-ledger serve` (not part of
run.py): the claim with budgets against without, and the life whose cost record carries a
model and tokens against cents alone.

    uv run --group bench python -m bench.ab_money [--c 16,64] [--rounds 6] [--seconds 3]

One embedded PostgreSQL, one database of 200,000 ready units, one serve. Each round, at each
concurrency, measures two windows back to back, A first in even rounds and B first in odd
ones (as bench.ab_serve does, so that the machine's drift falls on both):
- *budgets*: claim+start (httpbench's two requests, sub-agents of the window's own); A with
  no budget, B with httpbench.BUDGETS inserted before the window and deleted after (1,000
  budgets, a fleet-wide and a domain one over the claimed units, far from spent);
- *cost*: the five-request life; A records `{"cost_cents": 125}`, B httpbench.BY_MODEL
  (the same cents with a model, four token counts and `estimated`, as `run` records a
  Claude Code result);
- *controls* (`--what controls`, issue 38): claim+start, A with no flow controls, B with
  httpbench.CONTROLS (caps and pauses on 200 other fleets) inserted before the window.
It prints each window and the medians of the same-round ratios B/A: items per second
(goal ≥ 0.9), and CPU per item of serve and of PostgreSQL (steadier when other work
shares the cores). The JSON goes to `--out` (default bench/results/).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from bench import httpbench
from bench.ab_serve import claim_start_ops
from bench.claims import seed_ledger
from bench.harness import Operation, Server, load_average, measure, start_embedded

HERE = Path(__file__).resolve().parent
Ops = Callable[[list[httpbench.MiniHttp]], list[Operation]]


def cost_ops(cost: dict[str, Any]) -> Ops:
    return lambda clients: httpbench.life_ops(clients, cost)


# comparison -> (A's operations, B's, SQL before B's window, SQL after it)
COMPARISONS: dict[str, tuple[Ops, Ops, str | None, str | None]] = {
    "budgets": (claim_start_ops, claim_start_ops, httpbench.BUDGETS, "DELETE FROM budgets"),
    "cost": (cost_ops(httpbench.CENTS_ONLY), cost_ops(httpbench.BY_MODEL), None, None),
    # Issue 38: caps and pauses on other scopes, against none.
    "controls": (claim_start_ops, claim_start_ops, httpbench.CONTROLS, "DELETE FROM controls"),
}


async def window(
    server: Server, app: httpbench.AppProcess, tokens: list[str], ops: Ops, seconds: float
) -> dict[str, Any]:
    clients = [httpbench.MiniHttp(app.port, {"Authorization": f"Bearer {t}"}) for t in tokens]
    for client in clients:
        await client.open()
    try:
        sample = await measure(ops(clients), server=server, warmup=1, duration=seconds, app=app.ps)
    finally:
        for client in clients:
            await client.close()
    return sample.summary()


def ratios(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, float]:
    out = {}
    for key in ("items_per_s", "app_cpu_ms_per_item", "server_cpu_ms_per_item", "claim_p50_ms"):
        values = [b[key] / a[key] for a, b in pairs if a.get(key) and b.get(key) is not None]
        if values:
            out[key] = round(statistics.median(values), 3)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(x) for x in args.c.split(",")]
    home = Path(tempfile.mkdtemp(prefix="wl-ab-money-"))
    result: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_average_start": load_average(),
        "windows": [],
    }
    # Registered before the server starts, so it runs after the server has stopped.
    atexit.register(shutil.rmtree, home, True)
    server = await Server.attach(start_embedded(home / "pg"))
    tokens = await httpbench.build_token_template(server, max(levels), home)
    async with server.fresh_database("abm", httpbench.TEMPLATE) as url:
        conn = await asyncpg.connect(url)
        try:
            await seed_ledger(conn, 200_000)
            async with httpbench.app_process("serve", url, home) as app:
                for r in range(args.rounds):
                    for name in args.what.split(","):
                        a_ops, b_ops, before, after = COMPARISONS[name]
                        for c in levels:
                            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                                if side == "B" and before:
                                    await conn.execute(before)
                                ops = a_ops if side == "A" else b_ops
                                figure = await window(server, app, tokens[:c], ops, args.seconds)
                                if side == "B" and after:
                                    await conn.execute(after)
                                row = {"round": r, "what": name, "c": c, "side": side, **figure}
                                result["windows"].append(row)
                                print(
                                    f"round {r} {name} c={c} {side}: "
                                    f"{figure['items_per_s']:.0f}/s, app "
                                    f"{figure['app_cpu_ms_per_item']:.3f} ms/item, other "
                                    f"{figure['other_cpu_pct']:.0f} %",
                                    flush=True,
                                )
        finally:
            await conn.close()
    result["load_average_end"] = load_average()
    result["medians"] = summarize(result["windows"])
    return result


def summarize(windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name in dict.fromkeys(w["what"] for w in windows):
        for c in dict.fromkeys(w["c"] for w in windows if w["what"] == name):
            mine = [w for w in windows if w["what"] == name and w["c"] == c]
            by_round: dict[int, dict[str, dict[str, Any]]] = {}
            for w in mine:
                by_round.setdefault(w["round"], {})[w["side"]] = w
            pairs = [(x["A"], x["B"]) for x in by_round.values() if len(x) == 2]
            rows.append(
                {
                    "what": name,
                    "c": c,
                    "rounds": len(pairs),
                    "a_items_per_s": statistics.median(a["items_per_s"] for a, _ in pairs),
                    "b_items_per_s": statistics.median(b["items_per_s"] for _, b in pairs),
                    "other_cpu_pct": statistics.median(w["other_cpu_pct"] for w in mine),
                    "b_over_a": ratios(pairs),
                }
            )
    return rows


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--c", default="16,64", help="concurrencies, comma-separated")
    p.add_argument("--what", default="budgets,cost", help="which comparisons")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=3.0, help="each window's length")
    p.add_argument("--out", default=str(HERE / "results"))
    arguments = p.parse_args()
    outcome = asyncio.run(main(arguments))
    for row in outcome["medians"]:
        print(json.dumps(row))
    stamp = outcome["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = Path(arguments.out) / f"ab-money-{stamp}.json"
    path.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
    print(f"raw results: {path}")
