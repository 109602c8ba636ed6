"""The Temporal follower's lag from a run's close to its unit's `verified` event (one clock):
N workflows closing at once (`--burst`), on a Temporal dev server of its own (the `temporal`
CLI of the dev dependencies), serve and PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import datetime as dt
import json
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.harness import BIN, SECRET, app_process, free_port, percentile, recreated, server_url
from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.runtime import migrate_database
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role, TokenStore
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.executions import TemporalReader
from work_ledger.temporal.follower import Follower, FollowSettings, PassReport
from work_ledger.temporal.forwarder import LedgerForwarder

EVIDENCE = "https://ci.example/runs/bench"
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


async def gather_limited(coros: Sequence[Awaitable[Any]], limit: int = 32) -> list[Any]:
    """`asyncio.gather`, at most `limit` at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> Any:
        async with gate:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def temporal_server(home: Path, namespace: str) -> Iterator[str]:
    port = free_port()
    args = [str(BIN / "temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    args += ["--port", str(port), "--http-port", str(free_port()), "--namespace", namespace]
    args += ["--metrics-port", str(free_port()), "--log-level", "error"]
    with open(home / "temporal.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Temporal dev server did not start ({log.name})")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


async def _until_count(ledger: Ledger, state: str, n: int) -> None:
    count = "SELECT count(*) FROM work_units WHERE state = $1"
    async with asyncio.timeout(900):
        while await ledger.store.pool.fetchval(count, state) < n:  # noqa: ASYNC110 (a poll)
            await asyncio.sleep(0.05)


async def burst(address: str, n: int, home: Path) -> dict[str, Any]:
    client = await Client.connect(address, namespace="bench-burst")
    database_url = await recreated(server_url(home / "pg"), "bench_temporal")
    await migrate_database(database_url)
    pool = await create_pool(database_url, min_size=1, max_size=4)
    ledger = Ledger(Store(pool))
    token, _ = await TokenStore(Store(pool), SECRET.encode()).create(Role.PROJECTOR, "temporal")
    tag = uuid.uuid4().hex[:6]
    ids = [f"burst-{tag}-{i}" for i in range(n)]
    units = [NewUnit(f"unit-{w}", "bench", "orders", workflow_id=w) for w in ids]
    for i in range(0, n, 1000):
        await ledger.register(units[i : i + 1000], Actor("operator", privileged=True))
    passes: list[PassReport] = []
    stop, queue = asyncio.Event(), f"bench-{tag}"
    async with (
        app_process("serve", database_url, home) as app,
        Worker(client, task_queue=queue, workflows=[BenchMigrate], workflow_runner=RUNNER),
    ):
        follow = Follower(
            TemporalReader(client), FollowState(database_url),
            LedgerForwarder(f"http://127.0.0.1:{app.port}", token),
            namespace=client.namespace, settings=FollowSettings(),
        )  # fmt: skip
        starts = [client.start_workflow("BenchMigrate", True, id=w, task_queue=queue) for w in ids]
        handles = await gather_limited(starts)
        task = asyncio.create_task(follow.follow(stop, passes.append))
        await _until_count(ledger, "in_progress", n)
        before, signalled = len(passes), time.monotonic()
        await gather_limited([h.signal("proceed") for h in handles])
        await _until_count(ledger, "verified", n)
        converged = time.monotonic() - signalled
        stop.set()
        await task
    completed = await TemporalReader(client).runs("ExecutionStatus = 'Completed'")
    closes = {r.workflow_id: r.close_time for r in completed}
    rows = await pool.fetch(
        "SELECT u.workflow_id, e.created_at FROM work_unit_events e JOIN work_units u "
        "ON u.id = e.unit_id WHERE e.to_state = 'verified'"
    )
    await pool.close()
    lags = [(r["created_at"] - closes[r["workflow_id"]]).total_seconds() for r in rows]
    during = passes[before:]
    busy = [p for p in during if p.sent]
    return {
        "workflows": n, "lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
        "lag_max_s": max(lags), "all_verified_after_signal_s": round(converged, 2),
        "passes_during_burst": len(during), "passes_with_events": len(busy),
        "temporal_rpcs_per_busy_pass": [p.temporal_rpcs for p in busy],
        "ledger_requests_per_busy_pass": [p.ledger_requests for p in busy],
        "seconds_per_busy_pass": [round(p.read_seconds + p.deliver_seconds, 3) for p in busy],
    }  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="wl-bench-temporal-"))
    atexit.register(shutil.rmtree, home, True)  # after the embedded server has stopped
    result: dict[str, Any] = {"started": dt.datetime.now(dt.UTC).isoformat()}
    with temporal_server(home, "bench-burst") as address:
        result["burst"] = await burst(address, args.burst, home)
    print(json.dumps(result["burst"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"temporal-follow-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
