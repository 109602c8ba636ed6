"""The Temporal follower: lag from a run's close to its unit's state, and a pass's cost.

    uv run python -m bench.temporal_follow                      # burst 1000; closed 1000, 100000
    uv run python -m bench.temporal_follow --burst 200 --closed 1000,10000   # smaller
    uv run python -m bench.temporal_follow --closed 1000,100000 --temporal-db /tmp/t.db

Starts its own Temporal dev server (the `temporal` CLI of the dev dependencies, in
memory unless `--temporal-db`, free ports), its own embedded PostgreSQL and
`work-ledger serve`, all stopped at exit. Two measurements:

- **burst**: N units, N workflows waiting on a signal, the follower (default settings, no
  worker plugin) running; once every unit is in_progress, all N are signalled at once. Lag
  per unit = its `verified` event time minus Temporal's close time (one clock).
- **closed**: per N, a namespace `bench-closed-N` holding N closed executions (each start
  terminates the previous run of its workflow id: one RPC per close), older than the
  follower's overlap; then 20 fresh runs close and a new follower (checkpoint just before
  them) makes one pass. Its wall time and RPCs, median of `--rounds` (9) such passes,
  the namespaces taking turns. With `--temporal-db` the dev server keeps its SQLite file:
  namespaces filled once are re-used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.harness import free_port, gather_limited, percentile, wait_port
from work_ledger.db.connect import create_pool, ensure_database, with_database
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.embedded.server import embedded_server_url
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role, TokenStore
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.executions import TemporalReader
from work_ledger.temporal.follower import Follower, FollowSettings, PassReport
from work_ledger.temporal.forwarder import LedgerForwarder

BIN = Path(sys.executable).parent
SECRET = "bench-temporal-secret"
EVIDENCE = "https://ci.example/runs/bench"
CLOSED = "ExecutionStatus != 'Running'"
RUNNER = UnsandboxedWorkflowRunner()  # the workflow lives in __main__ beside the harness


@workflow.defn(name="BenchMigrate")
class BenchMigrate:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, wait: bool) -> dict[str, str]:
        if wait:
            await workflow.wait_condition(lambda: self.go)
        return {"evidence_url": EVIDENCE}


@contextlib.contextmanager
def temporal_server(home: Path, namespaces: list[str], db: Path | None) -> Iterator[str]:
    port = free_port()
    args = [str(BIN / "temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    if db is not None:  # kept between runs: a filled namespace is filled once
        args += ["--db-filename", str(db)]  # WAL, no fsync: a bench file, not a record
        args += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off"]
    args += ["--port", str(port), "--http-port", str(free_port())]
    args += ["--metrics-port", str(free_port()), "--log-level", "error"]
    for ns in namespaces:
        args += ["--namespace", ns]
    with open(home / "temporal.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.asynccontextmanager
async def ledger_served(admin: str, home: Path) -> AsyncIterator[tuple[Ledger, str, str, str]]:
    """(service, URL, projector token, database URL) of a ledger served on a new database."""
    name = f"wl_{home.name.replace('-', '_')}"
    await ensure_database(admin, name)
    database_url = with_database(admin, name)
    await migrate_database(database_url)
    pool = await create_pool(database_url, min_size=1, max_size=4)
    ledger = Ledger(Store(pool))
    token, _ = await TokenStore(Store(pool), SECRET.encode()).create(Role.PROJECTOR, "temporal")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env |= {"WL_DATABASE_URL": database_url, "WL_HOME": str(home), "WL_SECRET": SECRET}
    serve = await asyncio.create_subprocess_exec(
        *(str(BIN / "work-ledger"), "serve", "--port", str(port)),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield ledger, url, token, database_url
    finally:
        serve.terminate()
        await serve.wait()
        await pool.close()


def worker(client: Client, queue: str) -> Worker:
    return Worker(client, task_queue=queue, workflows=[BenchMigrate], workflow_runner=RUNNER)


def follower(client: Client, database_url: str, url: str, token: str, **kw: Any) -> Follower:
    return Follower(
        TemporalReader(client),
        FollowState(database_url),
        LedgerForwarder(url, token),
        namespace=client.namespace,
        settings=FollowSettings(**kw),
    )


async def burst(address: str, admin: str, n: int, home: Path) -> dict[str, Any]:
    client = await Client.connect(address, namespace="bench-burst")
    async with ledger_served(admin, home / "burst") as (ledger, url, token, database_url):
        tag = uuid.uuid4().hex[:6]
        ids = [f"burst-{tag}-{i}" for i in range(n)]
        units = [NewUnit(f"unit-{w}", "bench", "orders", workflow_id=w) for w in ids]
        for i in range(0, n, 1000):
            await ledger.register(units[i : i + 1000], Actor("operator", privileged=True))
        passes: list[PassReport] = []
        follow = follower(client, database_url, url, token)
        stop = asyncio.Event()
        queue = f"bench-{tag}"
        async with Worker(
            client, task_queue=queue, workflows=[BenchMigrate], workflow_runner=RUNNER
        ):
            handles = await gather_limited(
                [client.start_workflow("BenchMigrate", True, id=w, task_queue=queue) for w in ids]
            )
            task = asyncio.create_task(follow.follow(stop, passes.append))
            await _until_count(ledger, "in_progress", n)
            before = len(passes)
            signalled = time.monotonic()
            await gather_limited([h.signal("proceed") for h in handles])
            await _until_count(ledger, "verified", n)
            converged = time.monotonic() - signalled
            stop.set()
            await task
        closes = {
            r.workflow_id: r.close_time
            for r in await TemporalReader(client).runs("ExecutionStatus = 'Completed'")
        }
        rows = await ledger.store.pool.fetch(
            "SELECT u.workflow_id, e.created_at FROM work_unit_events e JOIN work_units u "
            "ON u.id = e.unit_id WHERE e.to_state = 'verified'"
        )
        lags = [(r["created_at"] - closes[r["workflow_id"]]).total_seconds() for r in rows]
        during = passes[before:]
        busy = [p for p in during if p.sent]
        return {
            "workflows": n,
            "lag_p50_s": round(percentile(lags, 50) or 0.0, 3),
            "lag_p99_s": round(percentile(lags, 99) or 0.0, 3),
            "lag_max_s": round(max(lags), 3),
            "all_verified_after_signal_s": round(converged, 2),
            "passes_during_burst": len(during),
            "passes_with_events": len(busy),
            "temporal_rpcs_per_busy_pass": [p.temporal_rpcs for p in busy],
            "ledger_requests_per_busy_pass": [p.ledger_requests for p in busy],
            "runs_per_busy_pass": [p.runs for p in busy],
            "read_seconds_per_busy_pass": [p.read_seconds for p in busy],
            "deliver_seconds_per_busy_pass": [p.deliver_seconds for p in busy],
            "temporal_rpcs_per_idle_pass": sorted({p.temporal_rpcs for p in during if not p.sent}),
        }


async def _until_count(ledger: Ledger, state: str, n: int) -> None:
    async with asyncio.timeout(900):
        while True:
            count = await ledger.store.pool.fetchval(
                "SELECT count(*) FROM work_units WHERE state = $1", state
            )
            if count >= n:
                return
            await asyncio.sleep(0.05)


async def _namespace_ready(client: Client) -> None:
    """The dev server registers its namespaces at start, but a frontend may not know one
    for a few seconds ("namespace not found"): wait for it."""
    async with asyncio.timeout(60):
        while True:
            try:
                await client.count_workflows()
                return
            except RPCError:
                await asyncio.sleep(1)


async def _start_retried(client: Client, workflow_id: str) -> None:
    """Start a run of `workflow_id`, terminating the one running under that id: one RPC
    that closes one execution (Terminated) and opens the next, with no worker and no timer
    (a 1 s execution timeout costs the dev server a timer task per run: 13-40 closes a
    second here, against 60-150 this way). The loaded dev server sometimes answers
    "namespace not found" or lets the RPC time out, so those are retried; a retried start
    that did get through only closes one more run."""
    for attempt in range(30):
        try:
            await client.start_workflow(
                "BenchMigrate",
                False,
                id=workflow_id,
                task_queue="nobody",
                id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
            return
        except RPCError as exc:
            retryable = (RPCStatusCode.NOT_FOUND, RPCStatusCode.DEADLINE_EXCEEDED)
            if exc.status not in retryable or attempt == 29:
                raise
            await asyncio.sleep(1)


async def fill(client: Client, total: int, chains: int = 128) -> float:
    """Bring the namespace to at least `total` closed executions (a namespace kept in
    `--temporal-db` from an earlier run may hold them already); returns the seconds spent.
    `chains` workflow ids side by side, each start closing its id's previous run."""
    began = time.monotonic()
    have = (await client.count_workflows(CLOSED)).count
    missing = total - have
    if missing <= 0:
        return 0.0
    tag = uuid.uuid4().hex[:6]
    chains = min(chains, missing)
    # a chain of k starts closes k - 1 runs; its last is terminated by id: k closes
    per_chain = [missing // chains + (1 if j < missing % chains else 0) for j in range(chains)]

    async def chain(j: int) -> None:
        for _ in range(per_chain[j]):
            await _start_retried(client, f"old-{tag}-{j}")
        await client.get_workflow_handle(f"old-{tag}-{j}").terminate("bench fill")

    await asyncio.gather(*(chain(j) for j in range(chains)))
    async with asyncio.timeout(600):  # visibility indexes the closes a little later
        while True:
            if (await client.count_workflows(CLOSED)).count >= total:
                return time.monotonic() - began
            await asyncio.sleep(1)


async def _fresh_closes(client: Client, ledger: Ledger, database_url: str) -> dt.datetime:
    """20 units and their runs, completed just after the follower's checkpoint (returned)."""
    tag = uuid.uuid4().hex[:6]
    fresh = [f"fresh-{tag}-{i}" for i in range(20)]
    units = [NewUnit(f"unit-{w}", "bench", "orders", workflow_id=w) for w in fresh]
    await ledger.register(units, Actor("operator", privileged=True))
    mark = dt.datetime.now(dt.UTC)
    await FollowState(database_url).advance(client.namespace, mark)
    queue = f"bench-{tag}"
    async with worker(client, queue):
        for w in fresh:
            await client.execute_workflow("BenchMigrate", False, id=w, task_queue=queue)
    return mark


async def closed_passes(
    clients: dict[int, Client], admin: str, home: Path, overlap: float, rounds: int
) -> list[dict[str, Any]]:
    """A pass's cost over 20 fresh closes in each namespace (`n` older closes in it). The
    namespaces take turns, one pass each per round, so a change of the machine's load
    falls on every N alike; the first round (connections warming up) is left out."""
    async with contextlib.AsyncExitStack() as stack:
        served, marks = {}, {}
        for n, client in clients.items():
            served[n] = await stack.enter_async_context(ledger_served(admin, home / f"c-{n}"))
            marks[n] = await _fresh_closes(client, served[n][0], served[n][3])
        await asyncio.sleep(1)  # visibility indexes the fresh closes
        samples: dict[int, list[tuple[float, PassReport]]] = {n: [] for n in clients}
        for _ in range(rounds + 1):
            for n, client in clients.items():
                _, url, token, database_url = served[n]
                # each pass moves the checkpoint; the window still starts `overlap` before
                # the first checkpoint, so every pass sweeps the same 20 closes
                since = (dt.datetime.now(dt.UTC) - marks[n]).total_seconds()
                f = follower(client, database_url, url, token, overlap=overlap + since, lag=0.0)
                started = time.perf_counter()
                report = await f.run_pass(describe=False)
                samples[n].append((time.perf_counter() - started, report))
        rows = []
        for n, client in clients.items():
            kept = samples[n][1:]
            rows.append(
                {
                    "namespace": client.namespace,
                    "closed_in_namespace": (await client.count_workflows(CLOSED)).count,
                    "pass_ms_median": round(statistics.median(s for s, _ in kept) * 1e3, 1),
                    "pass_ms_all": [round(s * 1e3, 1) for s, _ in kept],
                    "read_ms_median": round(
                        statistics.median(r.read_seconds for _, r in kept) * 1e3, 1
                    ),
                    "runs_in_window": kept[0][1].runs,
                    "temporal_rpcs": kept[0][1].temporal_rpcs,
                    "ledger_requests": kept[0][1].ledger_requests,
                }
            )
        return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--closed", default="1000,100000")
    parser.add_argument("--overlap", type=float, default=60.0)
    parser.add_argument(
        "--temporal-db",
        type=Path,
        help="the dev server's SQLite file, kept: its bench-closed-N namespaces are filled "
        "once and re-used by later runs (default: in memory, filled every run)",
    )
    parser.add_argument("--rounds", type=int, default=9, help="passes per namespace")
    parser.add_argument(
        "--no-fill",
        action="store_true",
        help="measure the bench-closed-N namespaces of --temporal-db as they stand (a fill "
        "stopped half way): closed_in_namespace says how many they hold",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    sizes = [int(s) for s in args.closed.split(",") if s]
    home = Path(tempfile.mkdtemp(prefix="wl-bench-temporal-"))
    namespaces = ["bench-burst", *(f"bench-closed-{n}" for n in sizes)]
    result: dict[str, Any] = {"started": dt.datetime.now(dt.UTC).isoformat()}
    admin = embedded_server_url(home / "pg", delete_on_exit=True)
    with temporal_server(home, namespaces, args.temporal_db) as address:
        if args.burst:
            result["burst"] = await burst(address, admin, args.burst, home)
            print(json.dumps(result["burst"]), flush=True)
        clients: dict[int, Client] = {}
        filled: dict[int, float] = {}
        for n in sizes:  # each N its own namespace: N closed executions in the namespace
            clients[n] = await Client.connect(address, namespace=f"bench-closed-{n}")
            await _namespace_ready(clients[n])
            filled[n] = 0.0 if args.no_fill else round(await fill(clients[n], n), 1)
            print(json.dumps({"namespace": f"bench-closed-{n}", "fill_seconds": filled[n]}))
        if any(filled.values()):
            await asyncio.sleep(args.overlap + 2)  # the old closes now lie before every window
        if clients:
            result["closed"] = await closed_passes(clients, admin, home, args.overlap, args.rounds)
            for row in result["closed"]:
                row["fill_seconds"] = filled[int(row["namespace"].rsplit("-", 1)[1])]
                print(json.dumps(row), flush=True)
            first, last = result["closed"][0], result["closed"][-1]
            result["pass_ratio_last_to_first"] = round(
                last["pass_ms_median"] / first["pass_ms_median"], 2
            )
            result["read_ratio_last_to_first"] = round(
                last["read_ms_median"] / first["read_ms_median"], 2
            )
            print(json.dumps({k: v for k, v in result.items() if k.endswith("first")}))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"temporal-follow-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
