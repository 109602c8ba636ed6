"""A/B two builds of `work-ledger serve` on one database, in alternating windows (not part
of run.py).

    uv run --group bench python -m bench.ab_serve A_BIN B_BIN [--c 16] [--rounds 6]
        [--seconds 4] [--life] [--b-env KEY=VALUE]

A_BIN and B_BIN are the `bin` folders of two virtual environments, each with its own build
of work-ledger (e.g. a second checkout at another commit, `uv sync --group bench` in it).
Both servers run side by side on one embedded PostgreSQL and one seeded database; each round
measures one window of claim+start (or, with --life, the five-request life) against each,
A first in even rounds and B first in odd ones, so the machine's drift falls on both. It
prints each window and the medians: items per second, the claim's p99, serve's CPU
per item and how busy serve was, and the medians of the same-round ratios B/A (the
figure to quote on a busy machine). The same comparison as `run.py`'s HTTP section,
without its minutes between the two figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg

from bench import httpbench
from bench.claims import seed_ledger
from bench.harness import Operation, Server, free_port, measure, start_embedded

_WINDOWS = itertools.count()


@contextlib.asynccontextmanager
async def serve(
    bin_dir: Path, url: str, home: Path, extra_env: dict[str, str]
) -> AsyncIterator[httpbench.AppProcess]:
    port = free_port()
    env = dict(os.environ, WL_DATABASE_URL=url, WL_HOME=str(home), WL_SECRET=httpbench.SECRET)
    env.update(extra_env)
    log = (home / f"serve-{port}.log").open("ab")
    cmd = [str(bin_dir / "work-ledger"), "serve", "--port", str(port)]
    proc = await asyncio.create_subprocess_exec(*cmd, env=env, stdout=log, stderr=log)
    try:
        for _ in range(300):
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
                probe = httpbench.MiniHttp(port, {})
                await probe.open()
                status, _ = await probe.request("GET", "/healthz")
                await probe.close()
                if status == 200:
                    break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"{bin_dir}: serve did not start (see {log.name})")
        yield httpbench.AppProcess(proc, port)
    finally:
        proc.terminate()
        await proc.wait()
        log.close()


def claim_start_ops(clients: list[httpbench.MiniHttp]) -> list[Operation]:
    """httpbench's claim+start, with sub-agent names of this window's own: a sub-agent of an
    earlier window still holds its unit, and would get it back (resumed) instead."""
    window = next(_WINDOWS)

    def op_for(i: int, client: httpbench.MiniHttp) -> Operation:
        counter = itertools.count()

        async def op() -> float | None:
            sub = f"X-WL-Agent: bench-agent-{i}/w{window}-{next(counter)}\r\n"
            t0 = time.perf_counter()
            ids = httpbench._ids(await client.post("/units/claim", {}, sub))
            latency = time.perf_counter() - t0
            if ids is None:
                return None
            unit, attempt = ids
            start = {"to": "in_progress", "attempt_id": attempt}
            await client.post(f"/units/{unit}/transition", start, sub)
            return latency

        return op

    return [op_for(i, c) for i, c in enumerate(clients)]


async def main(args: argparse.Namespace) -> None:
    builds = {"A": Path(args.a_bin), "B": Path(args.b_bin)}
    home = Path(tempfile.mkdtemp(prefix="wl-ab-"))
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    try:
        server = await Server.attach(start_embedded(home / "pg"))
        tokens = await httpbench.build_token_template(server, args.c, home)
        async with server.fresh_database("ab", httpbench.TEMPLATE) as url:
            conn = await asyncpg.connect(url)
            await seed_ledger(conn, 200_000)
            await conn.close()
            b_env = dict(pair.split("=", 1) for pair in args.b_env)
            async with (
                serve(builds["A"], url, home, {}) as a,
                serve(builds["B"], url, home, b_env) as b,
            ):
                apps = {"A": a, "B": b}
                for round_no in range(args.rounds):
                    for name in ("A", "B") if round_no % 2 == 0 else ("B", "A"):
                        app = apps[name]
                        clients = [
                            httpbench.MiniHttp(app.port, {"Authorization": f"Bearer {t}"})
                            for t in tokens[: args.c]
                        ]
                        for client in clients:
                            await client.open()
                        ops = (httpbench.life_ops if args.life else claim_start_ops)(clients)
                        sample = await measure(
                            ops, server=server, warmup=1, duration=args.seconds, app=app.ps
                        )
                        for client in clients:
                            await client.close()
                        figure = sample.summary()
                        figures[name].append(figure)
                        print(
                            f"round {round_no} {name}: {figure['items_per_s']:.0f}/s, "
                            f"p99 {figure['claim_p99_ms']:.1f} ms, app "
                            f"{figure['app_cpu_ms_per_item']:.3f} ms/item, "
                            f"{figure['app_cpu_pct']:.0f} % busy",
                            flush=True,
                        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for name, runs in figures.items():
        per_s = statistics.median(f["items_per_s"] for f in runs)
        app_ms = statistics.median(f["app_cpu_ms_per_item"] for f in runs)
        busy = statistics.median(f["app_cpu_pct"] for f in runs)
        p99 = statistics.median(f["claim_p99_ms"] for f in runs)
        print(
            f"{name} ({builds[name]}): median {per_s:.0f}/s, p99 {p99:.1f} ms, "
            f"app {app_ms:.3f} ms/item, {busy:.0f} % busy"
        )
    pairs = list(zip(figures["A"], figures["B"], strict=True))
    if pairs:
        for key in ("items_per_s", "claim_p99_ms", "app_cpu_ms_per_item"):
            ratio = statistics.median(b[key] / a[key] for a, b in pairs if a[key])
            print(f"B/A {key}: median of same-round ratios {ratio:.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("a_bin")
    p.add_argument("b_bin")
    p.add_argument("--c", type=int, default=16, help="clients (tokens), default 16")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=4.0, help="each window's length")
    p.add_argument("--life", action="store_true", help="the five-request life, not claim+start")
    p.add_argument(
        "--b-env", action="append", default=[], help="KEY=VALUE for B's serve only (repeatable)"
    )
    asyncio.run(main(p.parse_args()))
