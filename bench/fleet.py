"""A fleet of hundreds: N agents over HTTP, each with its own token, living units' lives.

Each agent is what docs/agents.md shows: the project's async SDK (`work_ledger.client`),
one `AsyncClient` per agent with its own token, asking `claim_next(wait_seconds=30)`, then
starting the unit, working on it (a sleep with a heartbeat halfway; the SDK also
heartbeats in the background, every third of a lease), recording its cost, verifying and
disposing it MIGRATED, then asking again. All agents are asyncio tasks in this one process:
an agent mostly waits, and the client's CPU is measured beside serve's, so a process that
became the limit would show (with the time each waited for a CPU: the machine's share).

Units arrive at a steady rate (a batch every half second, committed straight into the
ledger's table, as a registrar would) chosen so that about half the fleet is at work and
the rest is parked in long-polls. With two replicas, every agent gets both URLs, half of
them in each order, so the SDK's failover list also spreads the fleet.

Reported per run: lives per second, claim latency (from the later of the request and the
unit's arrival to the answer: a request's latency when a unit was ready, the wake-up's when
the agent was waiting), the other writes' latency, errors (raised to the agent, and every
answer over 399 or transport error the SDK saw and retried), and, sampled through the run,
each serve's RSS and open file descriptors, PostgreSQL's connections, and CPU.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil

from bench import httpbench
from bench.claims import EVIDENCE
from bench.harness import Server, percentile, process_tree_cpu
from work_ledger.api.connection import raise_open_files
from work_ledger.client.aio import AsyncClient
from work_ledger.client.aio_work import AsyncWork

WAIT_SECONDS = 30
INSERT_BATCH = (
    "INSERT INTO work_units (external_ref, fleet, domain) "
    "SELECT 'fleet-' || $1::text || '-' || g, 'bench', 'd' || (g % 4) "
    "FROM generate_series(1, $2) AS g RETURNING id"
)
CONNECTIONS = (
    "SELECT count(*) AS open, count(*) FILTER (WHERE state <> 'idle') AS busy "
    "FROM pg_stat_activity WHERE datname = $1 AND application_name = 'work-ledger'"
)


def run_queue_seconds(process: psutil.Process) -> float | None:
    """Seconds `process`'s main thread spent runnable but waiting for a CPU (Linux's
    schedstat): on a machine shared with other work, the part of a latency that is not ours."""
    try:
        fields = Path(f"/proc/{process.pid}/schedstat").read_text().split()
    except OSError:
        return None
    return int(fields[1]) / 1e9


def sizes(args: Any) -> dict[str, Any]:
    """The section's sizes by mode: fleets, seconds per run, an agent's work per unit."""
    if args.smoke:
        return {"fleets": [32], "replicas": [1, 2], "seconds": 15, "long": 15, "work": 2.0}
    if args.quick:
        return {"fleets": [256, 512], "replicas": [1, 2], "seconds": 120, "long": 120,
                "work": 10.0}  # fmt: skip
    # The goal's run (512 on one serve) lasts 10 minutes; the others a few.
    return {"fleets": [256, 512], "replicas": [1, 2], "seconds": 150, "long": 600, "work": 20.0}


class Counting(httpx.AsyncBaseTransport):
    """httpx's transport, counting what the SDK saw before its own retries."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.counts = counts

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
    """The agents' shared tallies."""

    def __init__(self, work: float) -> None:
        self.work = work
        # A lease far longer than the work, as in production (WL_LEASE_SECONDS 900): on a
        # machine shared with other work a request may wait seconds for a CPU, and a lapsed
        # lease would measure the machine, not the ledger. Each life heartbeats mid-work.
        self.lease = max(60, round(6 * work))
        self.arrived: dict[str, float] = {}
        self.claims: list[float] = []  # seconds, each claim that carried a unit
        self.writes: list[float] = []  # seconds, start, cost, verify, dispose
        self.lives = 0
        self.in_window = 0  # lives finished within the timed run
        self.empty_polls = 0
        self.waiting = 0
        self.raised: collections.Counter[str] = collections.Counter()
        self.seen: collections.Counter[str] = collections.Counter()

    async def agent(self, client: AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.life(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # counted, reported; the agent asks again
                self.raised[type(exc).__name__] += 1
                await asyncio.sleep(1)

    async def life(self, client: AsyncClient) -> None:
        sent = time.perf_counter()
        self.waiting += 1
        try:
            claim = await client.claim_next(wait_seconds=WAIT_SECONDS, lease_seconds=self.lease)
        finally:
            self.waiting -= 1
        answered = time.perf_counter()
        if claim.unit is None:
            self.empty_polls += 1
            return
        arrived = self.arrived.get(str(claim.unit.id), sent)
        # An answer may beat the feeder's own commit acknowledgement by a hair: clamp at 0.
        self.claims.append(max(0.0, answered - max(sent, arrived)))
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


async def feed(url: str, fleet: Fleet, per_second: float, stop: asyncio.Event) -> None:
    """A batch of units every half second, at `per_second` on average."""
    conn = await asyncpg.connect(url)
    try:
        batch, owed = 0, 0.0
        while not stop.is_set():
            owed += per_second / 2
            count, owed = int(owed), owed - int(owed)
            if count:
                rows = await conn.fetch(INSERT_BATCH, str(batch), count)
                committed = time.perf_counter()
                for row in rows:
                    fleet.arrived[str(row["id"])] = committed
                batch += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await conn.close()


async def sample(
    server: Server,
    url: str,
    apps: list[httpbench.AppProcess],
    fleet: Fleet,
    every: float,
    stop: asyncio.Event,
    out: list[dict[str, Any]],
) -> None:
    """One row every `every` seconds: serve's RSS and descriptors, PostgreSQL's connections."""
    name = urlsplit(url).path.lstrip("/")
    conn = await asyncpg.connect(server.admin_url)
    me = psutil.Process()
    began = time.perf_counter()
    cpu0 = [process_tree_cpu(a.ps) for a in apps], process_tree_cpu(me), server.cpu_seconds()
    waited0 = [run_queue_seconds(a.ps) for a in apps]
    me_waited0 = run_queue_seconds(me)
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            now = time.perf_counter() - began
            row = await conn.fetchrow(CONNECTIONS, name)
            pg = server.cpu_seconds()
            out.append(
                {
                    "t": round(now, 1),
                    "lives": fleet.lives,
                    "claims": len(fleet.claims),
                    "waiting": fleet.waiting,
                    "errors": sum(fleet.raised.values()),
                    "serve_rss_mb": [round(a.ps.memory_info().rss / 2**20, 1) for a in apps],
                    "serve_fds": [a.ps.num_fds() for a in apps],
                    "serve_cpu_pct": [
                        round(100 * (process_tree_cpu(a.ps) - c) / now, 1)
                        for a, c in zip(apps, cpu0[0], strict=True)
                    ],
                    "serve_run_queue_pct": [
                        None
                        if w0 is None or (w := run_queue_seconds(a.ps)) is None
                        else round(100 * (w - w0) / now, 1)
                        for a, w0 in zip(apps, waited0, strict=True)
                    ],
                    "client_cpu_pct": round(100 * (process_tree_cpu(me) - cpu0[1]) / now, 1),
                    "client_run_queue_pct": None
                    if me_waited0 is None or (mw := run_queue_seconds(me)) is None
                    else round(100 * (mw - me_waited0) / now, 1),
                    "client_rss_mb": round(me.memory_info().rss / 2**20, 1),
                    "pg_cpu_pct": None
                    if pg is None or cpu0[2] is None
                    else round(100 * (pg - cpu0[2]) / now, 1),
                    "pg_connections": row["open"],
                    "pg_connections_busy": row["busy"],
                }
            )
    finally:
        await conn.close()


async def one_run(
    server: Server, agents: int, replicas: int, seconds: float, work: float,
    tokens: list[str], home: Path,
) -> dict[str, Any]:  # fmt: skip
    fleet = Fleet(work)
    per_second = agents / 2 / work  # about half the fleet at work, the rest long-polling
    samples: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(server.fresh_database("fleet", httpbench.TEMPLATE))
        apps = [
            await stack.enter_async_context(httpbench.app_process("serve", url, home))
            for _ in range(replicas)
        ]
        bases = [f"http://127.0.0.1:{app.port}" for app in apps]
        clients = [
            AsyncClient(
                ",".join(bases[i % replicas :] + bases[: i % replicas]),
                token,
                transport=Counting(fleet.seen),
            )
            for i, token in enumerate(tokens[:agents])
        ]
        for client in clients:  # closed last, after the agents stopped
            stack.push_async_callback(client.aclose)
        stop, done = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(fleet.agent(c, done)) for c in clients]
        feeder = asyncio.create_task(feed(url, fleet, per_second, stop))
        sampler = asyncio.create_task(
            sample(server, url, apps, fleet, max(1.0, seconds / 60), stop, samples)
        )
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
    return summary(agents, replicas, seconds, per_second, fleet, samples)


def summary(
    agents: int, replicas: int, seconds: float, per_second: float, fleet: Fleet,
    samples: list[dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    ms = [x * 1000 for x in fleet.claims]
    wms = [x * 1000 for x in fleet.writes]
    # "Flat": the first sample after a tenth of the run (agents connected) against the last.
    settled = next((s for s in samples if s["t"] >= seconds / 10), samples[0] if samples else {})
    last = samples[-1] if samples else {}
    return {
        "agents": agents,
        "replicas": replicas,
        "seconds": seconds,
        "work_seconds": fleet.work,
        "lease_seconds": fleet.lease,
        "arrivals_per_s": round(per_second, 2),
        "lives": fleet.in_window,
        "lives_per_s": round(fleet.in_window / seconds, 2),
        "claims": len(ms),
        "empty_polls": fleet.empty_polls,
        "claim_p50_ms": percentile(ms, 50),
        "claim_p99_ms": percentile(ms, 99),
        "claim_max_ms": max(ms, default=None),
        "write_p50_ms": percentile(wms, 50),
        "write_p99_ms": percentile(wms, 99),
        "errors": sum(fleet.raised.values()),
        "errors_by_kind": dict(fleet.raised),
        "retried_or_refused": dict(fleet.seen),
        "serve_rss_mb": _course(samples, "serve_rss_mb", settled, last),
        "serve_fds": _course(samples, "serve_fds", settled, last),
        "pg_connections_max": max((s["pg_connections"] for s in samples), default=None),
        "pg_connections_busy_max": max((s["pg_connections_busy"] for s in samples), default=None),
        "serve_cpu_pct": last.get("serve_cpu_pct"),
        "serve_run_queue_pct": last.get("serve_run_queue_pct"),
        "client_cpu_pct": last.get("client_cpu_pct"),
        "client_run_queue_pct": last.get("client_run_queue_pct"),
        "load_average": os.getloadavg(),
        "pg_cpu_pct": last.get("pg_cpu_pct"),
        "samples": samples,
    }  # fmt: skip


def _course(
    samples: list[dict[str, Any]], key: str, settled: dict[str, Any], last: dict[str, Any]
) -> dict[str, Any]:
    """Per serve: after a tenth of the run, at the end, the max, and `flat`: the median of
    the last third of the samples ÷ that of the first third (a leak grows; a burst passes)."""
    if not samples:
        return {"settled": None, "end": None, "max": None, "flat": None}
    third = max(1, len(samples) // 3)
    each = range(len(samples[0][key]))
    return {
        "settled": settled.get(key),
        "end": last.get(key),
        "max": [max(s[key][i] for s in samples) for i in each],
        "flat": [
            round(statistics.median(s[key][i] for s in samples[-third:])
                  / statistics.median(s[key][i] for s in samples[:third]), 3)
            for i in each
        ],
    }  # fmt: skip


async def run(server: Server, args: Any, tokens: list[str], home: Path) -> dict[str, Any]:
    size = sizes(args)
    # 512 agents hold 512 sockets and more: lifted as serve lifts its own.
    out: dict[str, Any] = {"client_open_files": raise_open_files()[1], "runs": []}
    for agents in size["fleets"]:
        for replicas in size["replicas"]:
            goal = agents == max(size["fleets"]) and replicas == 1
            seconds = size["long"] if goal else size["seconds"]
            r = await one_run(server, agents, replicas, seconds, size["work"], tokens, home)
            out["runs"].append(r)
            print(
                f"fleet {agents} agents on {replicas} serve, {seconds:.0f}s: "
                f"{r['lives_per_s']}/s lives, claim p50 {_f(r['claim_p50_ms'])} "
                f"p99 {_f(r['claim_p99_ms'])} ms, writes p99 {_f(r['write_p99_ms'])} ms, "
                f"errors {r['errors']} {r['errors_by_kind']} seen {r['retried_or_refused']}, "
                f"rss {r['serve_rss_mb']}, fds {r['serve_fds']}, "
                f"pg conns max {r['pg_connections_max']}, cpu serve {r['serve_cpu_pct']} "
                f"client {r['client_cpu_pct']} pg {r['pg_cpu_pct']}; waited for a CPU: serve "
                f"{r['serve_run_queue_pct']} client {r['client_run_queue_pct']} %; "
                f"load {r['load_average']}",
                flush=True,
            )
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
