"""The A/B mode: two builds of `work-ledger serve` on one database, in alternating windows.

    uv run --group bench python -m bench.run --against REV [--concurrency 16,64] [--reps 3]
        [--duration 4] [--life] [--keyed]
    uv run --group bench python -m bench.ab A_BIN B_BIN [--c 16] [--rounds 6] [--life]

`--against REV` builds work-ledger at git revision REV (`git archive`, then `uv sync
--frozen` in a temporary folder) as A, and takes this checkout's build as B. `bench.ab`
takes the `bin` folders of two virtual environments instead. Both servers run side by side
on one PostgreSQL (WL_DATABASE_URL's, or the embedded one) and one seeded database; each
round measures one window of claim+start (or, with --life, the five-request life; with
--keyed, each request keyed as the SDK sends) against each, A first in even rounds and B
first in odd ones, so the machine's drift falls on both. It prints each window, the
medians, and the medians of the same-round ratios B/A: the figure to quote on a busy
machine. This replaced bench.ab_serve and bench.ab_money (issue 43).

    uv run --group bench python -m bench.ab --otlp [--c 64] [--agents 64] [--every 5]

Issue 40's speed goal (B/A items per second ≥ 0.95): this build on both sides, B's windows
while `--agents` more agents, each holding a unit of its own, post to B's /otlp/v1/logs
every `--every` seconds (staggered) the batch Claude Code 2.1.197 really sent
(tests/cli/fixtures/claude_otlp, 9 records, 3 of them api_request), each time with a fresh
session id, so every record is new and written, never a replay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg

from bench import httpbench
from bench.claims import seed_ledger
from bench.harness import Operation, Server, free_port, measure, server_url

HERE = Path(__file__).resolve().parent
CAPTURED = HERE.parent / "tests" / "cli" / "fixtures" / "claude_otlp" / "http-json-1.body"
CAPTURED_ATTEMPT = "0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b"


def build(rev: str, into: Path) -> Path:
    """A virtual environment holding work-ledger as it is at git revision `rev`; its `bin`."""
    source = into / "source"
    source.mkdir(parents=True)
    tree = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=tree, check=True)
    subprocess.run(
        ["uv", "sync", "--frozen", "--all-extras", "--no-dev", "--project", str(source)],
        check=True,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )
    return source / ".venv" / "bin"


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
        for _ in range(900):  # 180 s: a loaded machine starts serve slowly
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


def claim_start_ops(clients: list[httpbench.MiniHttp], keyed: bool = False) -> list[Operation]:
    """httpbench's claim+start, with sub-agent names of this window's own: a sub-agent of an
    earlier window still holds its unit, and would get it back (resumed) instead."""
    window = next(_WINDOWS)

    def op_for(i: int, client: httpbench.MiniHttp) -> Operation:
        counter = itertools.count()

        async def op() -> float | None:
            sub = f"X-WL-Agent: bench-agent-{i}/w{window}-{next(counter)}\r\n"
            t0 = time.perf_counter()
            ids = httpbench._ids(await client.post("/units/claim", {}, sub + _key(keyed)))
            latency = time.perf_counter() - t0
            if ids is None:
                return None
            unit, attempt = ids
            start = {"to": "in_progress", "attempt_id": attempt}
            await client.post(f"/units/{unit}/transition", start, sub + _key(keyed))
            return latency

        return op

    return [op_for(i, c) for i, c in enumerate(clients)]


def _key(keyed: bool) -> str:
    return httpbench._key(keyed)


class OtlpLoad:
    """Agents exporting Claude Code's telemetry to B during B's windows (issue 40)."""

    def __init__(self, agents: int, every: float) -> None:
        self.agents, self.every = agents, every
        self.attempts: dict[str, str] = {}  # token: the attempt its agent holds

    @contextlib.asynccontextmanager
    async def during(self, port: int, tokens: list[str]) -> AsyncIterator[None]:
        for token in tokens:
            if token not in self.attempts:  # each agent claims once, before its first export
                client = httpbench.MiniHttp(port, {"Authorization": f"Bearer {token}"})
                await client.open()
                ids = httpbench._ids(await client.post("/units/claim", {}))
                await client.close()
                assert ids is not None, "no unit to claim"
                self.attempts[token] = ids[1]
        step = self.every / max(1, len(tokens))
        senders = [
            asyncio.create_task(self._export(port, t, self.attempts[t], i * step))
            for i, t in enumerate(tokens)
        ]
        try:
            yield
        finally:
            for task in senders:
                task.cancel()
            await asyncio.gather(*senders, return_exceptions=True)

    async def _export(self, port: int, token: str, attempt: str, offset: float) -> None:
        """One agent's exporter: the batch every `every` s, a new session's each time, on
        a connection of its own (serve closes an idle one, as an exporter's would be)."""
        template = CAPTURED.read_text().replace(CAPTURED_ATTEMPT, attempt)
        record = json.loads(template)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
        session = next(
            a["value"]["stringValue"] for a in record["attributes"] if a["key"] == "session.id"
        )
        await asyncio.sleep(offset)
        while True:
            batch = json.loads(template.replace(session, str(uuid.uuid4())))
            client = httpbench.MiniHttp(port, {"Authorization": f"Bearer {token}"})
            await client.open()
            try:
                status, answer = await client.request("POST", "/otlp/v1/logs", batch)
            finally:
                await client.close()
            if status != 200 or (answer or {}).get("partialSuccess"):
                raise RuntimeError(f"OTLP export -> {status}: {answer}")
            await asyncio.sleep(self.every)


async def compare(
    a_bin: Path,
    b_bin: Path,
    c: int,
    *,
    rounds: int = 6,
    seconds: float = 4.0,
    life: bool = False,
    keyed: bool = False,
    b_env: dict[str, str] | None = None,
    b_load: OtlpLoad | None = None,
) -> dict[str, Any]:
    """Rounds of one window against each build; the medians and the same-round ratios."""
    builds = {"A": a_bin, "B": b_bin}
    home = Path(tempfile.mkdtemp(prefix="wl-ab-"))
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    ops_for = partial(httpbench.life_ops if life else claim_start_ops, keyed=keyed)
    extra = b_load.agents if b_load else 0
    try:
        server = await Server.attach(server_url(home / "pg"))
        tokens = await httpbench.build_token_template(server, c + extra, home)
        async with server.fresh_database("ab", httpbench.TEMPLATE) as url:
            conn = await asyncpg.connect(url)
            await seed_ledger(conn, 200_000)
            await conn.close()
            async with (
                serve(builds["A"], url, home, {}) as a,
                serve(builds["B"], url, home, b_env or {}) as b,
            ):
                apps = {"A": a, "B": b}
                for round_no in range(rounds):
                    for name in ("A", "B") if round_no % 2 == 0 else ("B", "A"):
                        app = apps[name]
                        clients = [
                            httpbench.MiniHttp(app.port, {"Authorization": f"Bearer {t}"})
                            for t in tokens[:c]
                        ]
                        for client in clients:
                            await client.open()
                        async with contextlib.AsyncExitStack() as load:
                            if b_load is not None and name == "B":
                                await load.enter_async_context(b_load.during(b.port, tokens[c:]))
                            sample = await measure(
                                ops_for(clients), server=server, warmup=1, duration=seconds,
                                app=app.ps,
                            )  # fmt: skip
                        for client in clients:
                            await client.close()
                        figure = sample.summary()
                        figures[name].append(figure)
                        print(
                            f"c={c} round {round_no} {name}: {figure['items_per_s']:.0f}/s, "
                            f"p99 {figure['claim_p99_ms']:.1f} ms, app "
                            f"{figure['app_cpu_ms_per_item']:.3f} ms/item, "
                            f"{figure['app_cpu_pct']:.0f} % busy",
                            flush=True,
                        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    keys = ("items_per_s", "claim_p99_ms", "app_cpu_ms_per_item", "app_cpu_pct")
    pairs = list(zip(figures["A"], figures["B"], strict=True))
    result = {
        "c": c,
        "loop": ("life" if life else "claim+start")
        + (", keyed" if keyed else "")
        + (f"; B beside {extra} agents exporting telemetry" if b_load else ""),
        "builds": {name: str(path) for name, path in builds.items()},
        "median": {
            name: {k: statistics.median(f[k] for f in runs) for k in keys}
            for name, runs in figures.items()
        },
        "b_over_a": {k: statistics.median(b[k] / a[k] for a, b in pairs if a[k]) for k in keys[:3]},
        "windows": figures,
    }
    for k, ratio in result["b_over_a"].items():
        print(f"c={c} B/A {k}: median of same-round ratios {ratio:.3f}", flush=True)
    return result


async def against(rev: str, args: argparse.Namespace) -> dict[str, Any]:
    """`bench.run --against REV`: REV's build as A, this checkout's as B, at each level."""
    scratch = Path(tempfile.mkdtemp(prefix="wl-against-"))
    try:
        a_bin = build(rev, scratch)
        b_bin = Path(sys.executable).parent
        rounds = max(2, 2 * args.reps)
        return {
            "rev": rev,
            "levels": [
                await compare(
                    a_bin, b_bin, c, rounds=rounds, seconds=args.duration,
                    life=args.life, keyed=args.keyed,
                )
                for c in args.levels
            ],
        }  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def markdown(ab: dict[str, Any]) -> list[str]:
    lines = [
        f"## A/B: A = {ab['rev']}, B = this checkout (medians of same-round ratios B/A)",
        "",
        "| loop | c | B/A items/s | B/A claim p99 | B/A serve CPU/item | A items/s | B items/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for level in ab["levels"]:
        r, m = level["b_over_a"], level["median"]
        lines.append(
            f"| {level['loop']} | {level['c']} | {r['items_per_s']:.3f} "
            f"| {r['claim_p99_ms']:.3f} | {r['app_cpu_ms_per_item']:.3f} "
            f"| {m['A']['items_per_s']:.0f} | {m['B']['items_per_s']:.0f} |"
        )
    return lines


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    here = Path(sys.executable).parent
    p.add_argument("a_bin", type=Path, nargs="?", default=here, help="default: this build")
    p.add_argument("b_bin", type=Path, nargs="?", default=here, help="default: this build")
    p.add_argument("--otlp", action="store_true", help="B beside agents exporting telemetry")
    p.add_argument("--agents", type=int, default=64, help="--otlp: exporting agents")
    p.add_argument("--every", type=float, default=5.0, help="--otlp: each one's interval (s)")
    p.add_argument("--c", type=int, default=16, help="clients (tokens), default 16")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=4.0, help="each window's length")
    p.add_argument("--life", action="store_true", help="the five-request life, not claim+start")
    p.add_argument("--keyed", action="store_true", help="an Idempotency-Key on every request")
    p.add_argument(
        "--b-env", action="append", default=[], help="KEY=VALUE for B's serve only (repeatable)"
    )
    a = p.parse_args()
    b_env = dict(pair.split("=", 1) for pair in a.b_env)
    asyncio.run(
        compare(a.a_bin, a.b_bin, a.c, rounds=a.rounds, seconds=a.seconds, life=a.life,
                keyed=a.keyed, b_env=b_env,
                b_load=OtlpLoad(a.agents, a.every) if a.otlp else None)
    )  # fmt: skip
