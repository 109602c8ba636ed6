"""What agents cost: a fleet of hundreds through the async SDK (`--sections fleet`), and one
agent's share (`python -m bench.agents [--slim VENV] [--baseline VENV]`, bench/AGENTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil

from bench.claims import EVIDENCE
from bench.harness import (
    BIN,
    CONNECTIONS,
    TOKENS_TEMPLATE,
    AppProcess,
    Server,
    app_process,
    mint_token,
    percentile,
    process_tree_cpu,
    recreated,
    server_url,
)
from work_ledger.api.connection import raise_open_files
from work_ledger.client.aio import AsyncClient
from work_ledger.client.aio_work import AsyncWork
from work_ledger.runtime import migrate_database

INSERT_BATCH = (
    "INSERT INTO work_units (external_ref, fleet, domain) "
    "SELECT 'fleet-' || $1::text || '-' || g, 'bench', 'd' || (g % 4) "
    "FROM generate_series(1, $2) AS g RETURNING id"
)


def run_queue_seconds(process: psutil.Process) -> float | None:
    """Seconds `process`'s main thread spent runnable but waiting for a CPU (Linux's
    schedstat): on a machine shared with other work, the part of a latency that is not ours."""
    try:
        return int(Path(f"/proc/{process.pid}/schedstat").read_text().split()[1]) / 1e9
    except OSError:
        return None


def sizes(args: Any) -> tuple[list[int], float, float, float]:
    """Fleets, seconds per run, the goal's run (the largest on one serve), work per unit."""
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    return {"smoke": ([32], 15, 15, 2.0), "quick": ([256, 512], 120, 120, 10.0),
            "full": ([256, 512], 150, 600, 20.0)}[mode]  # fmt: skip


class Counting(httpx.AsyncBaseTransport):
    """httpx's transport, counting what the SDK saw before its own retries."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self.inner, self.counts = httpx.AsyncHTTPTransport(), counts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            self.counts[type(exc).__name__] += 1
            raise
        if response.status_code >= 400:
            # The problem's code names the rule (read whole here; the SDK reads it again).
            body = await response.aread()
            code = body.split(b'"code":"', 1)[-1].split(b'"', 1)[0].decode(errors="replace")
            self.counts[f"http {response.status_code} {code[:40]}"] += 1
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Fleet:
    """The agents (docs/agents.md's loop through the SDK) and their shared tallies."""

    def __init__(self, work: float) -> None:
        self.work = work
        # A lease far longer than the work, as in production (WL_LEASE_SECONDS 900): on a
        # machine shared with other work a request may wait seconds for a CPU, and a lapsed
        # lease would measure the machine, not the ledger. Each life heartbeats mid-work.
        self.lease = max(60, round(6 * work))
        self.arrived: dict[str, float] = {}
        self.claims: list[float] = []  # seconds, each claim that carried a unit
        self.writes: list[float] = []  # seconds, start, heartbeat, cost, verify, dispose
        self.lives = self.in_window = self.empty_polls = self.waiting = 0
        self.raised: collections.Counter[str] = collections.Counter()
        self.seen: collections.Counter[str] = collections.Counter()

    async def agent(self, client: AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.life(client)
            except Exception as exc:  # counted, reported; the agent asks again
                self.raised[type(exc).__name__] += 1
                await asyncio.sleep(1)

    async def life(self, client: AsyncClient) -> None:
        sent = time.perf_counter()
        self.waiting += 1
        try:
            claim = await client.claim_next(wait_seconds=30, lease_seconds=self.lease)
        finally:
            self.waiting -= 1
        if claim.unit is None:
            self.empty_polls += 1
            return
        # From the later of the request and the unit's arrival (clamped: an answer may
        # beat the feeder's own commit acknowledgement by a hair).
        arrived = self.arrived.get(str(claim.unit.id), sent)
        self.claims.append(max(0.0, time.perf_counter() - max(sent, arrived)))
        async with AsyncWork(client, claim, lease_seconds=self.lease) as work:
            await self.timed(work.start())
            await asyncio.sleep(random.uniform(0.25, 0.75) * self.work)
            await self.timed(work.heartbeat())
            await asyncio.sleep(random.uniform(0.25, 0.75) * self.work)
            await self.timed(work.cost(125))
            await self.timed(work.verify(EVIDENCE))
            await self.timed(work.dispose("MIGRATED"))
        self.lives += 1

    async def timed(self, write: Any) -> None:
        t0 = time.perf_counter()
        await write
        self.writes.append(time.perf_counter() - t0)

    async def feed(self, url: str, per_second: float, stop: asyncio.Event) -> None:
        """A batch of units every half second, at `per_second` on average, committed
        straight into the table as a registrar would."""
        conn = await asyncpg.connect(url)
        batch, owed = 0, 0.0
        while not stop.is_set():
            owed += per_second / 2
            if count := int(owed):
                owed -= count
                rows = await conn.fetch(INSERT_BATCH, str(batch), count)
                now, batch = time.perf_counter(), batch + 1
                self.arrived.update((str(r["id"]), now) for r in rows)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        await conn.close()


async def sample(server: Server, url: str, apps: list[AppProcess], fleet: Fleet, every: float,
                 stop: asyncio.Event, out: list[dict[str, Any]]) -> None:  # fmt: skip
    """A row every `every` s: serve's RSS and descriptors, PostgreSQL's connections, and the
    CPU and the wait for a CPU of each party since the start, in % of one core."""
    conn = await asyncpg.connect(server.admin_url)
    parties = {f"serve{i}": a.ps for i, a in enumerate(apps)} | {"client": psutil.Process()}

    def now() -> dict[str, float | None]:
        cpu = {k: process_tree_cpu(p) for k, p in parties.items()} | {"pg": server.cpu_seconds()}
        return cpu | {f"{k} waiting": run_queue_seconds(p) for k, p in parties.items()}

    began, cpu0 = time.perf_counter(), now()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            t, cpu = time.perf_counter() - began, now()

            def pct(a: float | None, b: float | None, t: float = t) -> float | None:
                return None if a is None or b is None else round(100 * (b - a) / t, 1)

            row = await conn.fetchrow(CONNECTIONS, urlsplit(url).path[1:])
            out.append({
                "t": round(t, 1), "lives": fleet.lives, "claims": len(fleet.claims),
                "waiting": fleet.waiting, "errors": sum(fleet.raised.values()),
                "serve_rss_mb": [round(a.ps.memory_info().rss / 2**20, 1) for a in apps],
                "serve_fds": [a.ps.num_fds() for a in apps],
                "cpu_pct": {k: pct(cpu0[k], cpu[k]) for k in cpu},  # and the wait for a CPU
                "client_rss_mb": round(parties["client"].memory_info().rss / 2**20, 1),
                "pg_connections": row["open"], "pg_connections_busy": row["busy"],
            })  # fmt: skip
    finally:
        await conn.close()


def _course(samples: list[dict[str, Any]], key: str, settled: dict[str, Any]) -> dict[str, Any]:
    """Per serve: after a tenth of the run, at the end, the max, and `flat`: the median of
    the last third of the samples ÷ that of the first third (a leak grows; a burst passes)."""
    if not samples:
        return {"settled": None, "end": None, "max": None, "flat": None}
    third, each = max(1, len(samples) // 3), range(len(samples[0][key]))

    def median(part: list[dict[str, Any]], i: int) -> float:
        return statistics.median(s[key][i] for s in part)

    flat = [round(median(samples[-third:], i) / median(samples[:third], i), 3) for i in each]
    maxima = [max(s[key][i] for s in samples) for i in each]
    return {"settled": settled.get(key), "end": samples[-1][key], "max": maxima, "flat": flat}


async def one_run(server: Server, agents: int, replicas: int, seconds: float, work: float,
                  tokens: list[str], home: Path) -> dict[str, Any]:  # fmt: skip
    """`agents` agents on `replicas` serves (every agent gets every URL, half of them in each
    order); units arrive for about half the fleet, the rest waits in long-polls."""
    fleet, samples = Fleet(work), []
    per_second = agents / 2 / work
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(server.fresh_database("fleet", TOKENS_TEMPLATE))
        serves = [app_process("serve", url, home) for _ in range(replicas)]
        apps = [await stack.enter_async_context(serve) for serve in serves]
        bases = [f"http://127.0.0.1:{app.port}" for app in apps]
        urls = [",".join(bases[i % replicas :] + bases[: i % replicas]) for i in range(agents)]
        pairs = zip(urls, tokens[:agents], strict=True)
        clients = [AsyncClient(u, t, transport=Counting(fleet.seen)) for u, t in pairs]
        for client in clients:  # closed last, after the agents stopped
            stack.push_async_callback(client.aclose)
        stop, done = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(fleet.agent(c, done)) for c in clients]
        feeder = asyncio.create_task(fleet.feed(url, per_second, stop))
        every = max(1.0, seconds / 60)
        sampler = asyncio.create_task(sample(server, url, apps, fleet, every, stop, samples))
        try:
            await asyncio.sleep(seconds)
        finally:
            fleet.in_window = fleet.lives
            stop.set()
            await asyncio.gather(feeder, sampler, return_exceptions=True)
            # The agents finish the lives in hand; those still waiting are cancelled.
            done.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 2 * work)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    ms, wms = [x * 1000 for x in fleet.claims], [x * 1000 for x in fleet.writes]
    settled = next((s for s in samples if s["t"] >= seconds / 10), samples[0] if samples else {})
    last = samples[-1] if samples else {}
    return {
        "agents": agents, "replicas": replicas, "seconds": seconds, "work_seconds": work,
        "lease_seconds": fleet.lease, "arrivals_per_s": round(per_second, 2),
        "lives": fleet.in_window, "lives_per_s": round(fleet.in_window / seconds, 2),
        "claims": len(ms), "empty_polls": fleet.empty_polls,
        "claim_p50_ms": percentile(ms, 50), "claim_p99_ms": percentile(ms, 99),
        "write_p50_ms": percentile(wms, 50), "write_p99_ms": percentile(wms, 99),
        "errors": sum(fleet.raised.values()), "errors_by_kind": dict(fleet.raised),
        "retried_or_refused": dict(fleet.seen),
        "serve_rss_mb": _course(samples, "serve_rss_mb", settled),
        "serve_fds": _course(samples, "serve_fds", settled),
        "pg_connections_max": max((s["pg_connections"] for s in samples), default=None),
        "cpu_pct": last.get("cpu_pct"),
        "load_average": os.getloadavg(), "samples": samples,
    }  # fmt: skip


async def fleet(server: Server, args: Any, tokens: list[str], home: Path) -> dict[str, Any]:
    fleets, seconds, long, work = sizes(args)
    # 512 agents hold 512 sockets and more: lifted as serve lifts its own.
    out: dict[str, Any] = {"client_open_files": raise_open_files()[1], "runs": []}
    for agents in fleets:
        for replicas in (1, 2):
            run_for = long if agents == max(fleets) and replicas == 1 else seconds
            r = await one_run(server, agents, replicas, run_for, work, tokens, home)
            out["runs"].append(r)
            print(f"fleet: { {k: v for k, v in r.items() if k != 'samples'} }", flush=True)
    return out


# -- one agent's share ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def mcp_session(url: str, token: str, agent: str) -> Any:
    """An MCP session (the 2025 handshake, as Claude Code speaks it)."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    import mcp

    headers = {"Authorization": f"Bearer {token}", "X-WL-Agent": agent}
    async with (
        create_mcp_http_client(headers=headers) as http,
        mcp.Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as s,
    ):
        yield s


async def mcp_costs(ps: psutil.Process, url: str, token: str, args: Any) -> dict[str, float]:
    """serve's RSS before and with `--sessions` idle MCP sessions (each with its GET stream
    open), and its CPU per `show` tool call over MCP and per GET /units/{unit} over REST."""

    async def per_call(call: Any) -> float:
        for _ in range(20):
            await call()
        start = process_tree_cpu(ps)
        for _ in range(args.calls):
            await call()
        return (process_tree_cpu(ps) - start) / args.calls * 1000

    async with mcp_session(url, token, "operator/cpu") as session:
        mcp_ms = await per_call(lambda: session.call_tool("show", {"unit": "bench/show"}))
    await asyncio.sleep(1)
    before = ps.memory_info().rss / 2**20
    async with contextlib.AsyncExitStack() as stack:
        for i in range(args.sessions):
            session = await stack.enter_async_context(mcp_session(url, token, f"operator/s{i}"))
            await session.list_tools()
        await asyncio.sleep(3)
        during = ps.memory_info().rss / 2**20
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        rest_ms = await per_call(lambda: http.get("/units/bench/show"))
    return {"rss_before_mb": before, "rss_with_sessions_mb": during,
            "growth_per_session_mb": (during - before) / args.sessions,
            "mcp_ms_per_call": mcp_ms, "rest_ms_per_call": rest_ms,
            "mcp_over_rest": mcp_ms / rest_ms}  # fmt: skip


def verbs(bindir: Path, url: str, token: str, agent: str) -> dict[str, Any]:
    """`work-ledger show X --json` (median wall and CPU time of 11, start to exit: the CPU
    is the figure to compare on a shared machine), the peak RSS (VmHWM) of a `run -- sleep
    3` wrapper, and whether the environment's httpx has its bytecode compiled: without it
    (and with PYTHONDONTWRITEBYTECODE) every run compiles every module it imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env |= {"WL_URL": url, "WL_TOKEN": token, "WL_AGENT": agent}
    cli, walls, cpus = str(bindir / "work-ledger"), [], []
    for _ in range(11):
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(
            [cli, "show", "bench/show", "--json"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    proc, peak = (
        subprocess.Popen([cli, "run", "--", "sleep", "3"], env=env, stdout=subprocess.DEVNULL),
        0.0,
    )
    while proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak = max(peak, int(status.split("VmHWM:")[1].split()[0]) / 1024)
        time.sleep(0.05)
    httpx_dir = next(bindir.parent.glob("lib/python*/site-packages")) / "httpx"
    return {"show_json_ms": statistics.median(walls) * 1000, "run_peak_rss_mb": peak,
            "show_json_cpu_ms": statistics.median(cpus) * 1000,
            "bytecode": any(httpx_dir.glob("__pycache__/*.pyc"))}  # fmt: skip


async def agent_share(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    url = await recreated(server_url(home / "pg"), "bench_agents")
    await migrate_database(url)
    token = await mint_token(url, home, "operator", "operator")
    found: dict[str, Any] = {"sessions": args.sessions, "calls": args.calls}
    if args.slim:  # the slim wheel as `uv pip install` lays it out, and its bytecode
        files = [p for p in next(args.slim.glob("lib/python*/site-packages")).rglob("*")
                 if p.is_file() and not p.is_symlink()]  # fmt: skip
        for key, pyc in (("slim_install_mb", False), ("slim_bytecode_mb", True)):
            found[key] = sum(p.stat().st_size for p in files if (p.suffix == ".pyc") == pyc) / 2**20
    async with app_process("serve", url, home) as app:
        base = f"http://127.0.0.1:{app.port}"
        units = [{"external_ref": r, "fleet": "bench"} for r in ("bench/show", "bench/run-1")]
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers) as http:
            (await http.post("/units", json={"units": units})).raise_for_status()
        found |= await mcp_costs(app.ps, base, token, args)
        envs = {"full": BIN, "slim": args.slim, "baseline": args.baseline}
        for n, (name, venv) in enumerate(envs.items()):
            if venv:
                bindir = venv if name == "full" else venv / "bin"
                found[name] = await asyncio.to_thread(verbs, bindir, base, token, f"operator/r{n}")
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slim", type=Path, help="a virtualenv holding only the slim client")
    parser.add_argument("--baseline", type=Path, help="another version's virtualenv, its verbs")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=200)
    home = Path(tempfile.mkdtemp(prefix="wl-bench-agents-"))
    atexit.register(shutil.rmtree, home, True)  # after the embedded server has stopped
    found = asyncio.run(agent_share(parser.parse_args(), home))
    found |= {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ"), "load_average": os.getloadavg()}
    out = Path("bench/results") / f"agents-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found, indent=1), f"\n(written to {out})")
