"""The measuring machinery: our own PostgreSQL, fresh databases, CPU meters, a timed loop.

Every figure a scenario reports comes from `measure()`: N workers run one operation in a
closed loop; after a warm-up, a window of fixed length is timed; throughput counts the
operations that finished inside the window, latencies are those operations' own, and CPU
is the delta of process CPU times across exactly that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from work_ledger.db.connect import with_database

# A claim loop at c=256 needs 256 connections of its own, plus the seeding and metering
# connections; the embedded server's default is 100.
MAX_CONNECTIONS = 600

_CONFIGURE = """
import asyncio, sys
from pathlib import Path
import asyncpg
from work_ledger.embedded.server import embedded_server_url

async def main() -> None:
    conn = await asyncpg.connect(embedded_server_url(Path(sys.argv[1])))
    await conn.execute("ALTER SYSTEM SET max_connections = {max_connections}")
    await conn.close()

asyncio.run(main())
"""


def start_embedded(home: Path) -> str:
    """Start the embedded server under `home`, sized for the benchmark; its admin URL. A
    short-lived process first initialises it and raises max_connections (which needs a
    restart); when it exits, the server stops, and this process starts it again."""
    from work_ledger.embedded.server import embedded_server_url

    script = _CONFIGURE.replace("{max_connections}", str(MAX_CONNECTIONS))
    subprocess.run([sys.executable, "-c", script, str(home)], check=True)
    return embedded_server_url(home)


def server_url(home: Path) -> str:
    """The admin URL of the server to measure on: WL_DATABASE_URL's (a user who may CREATE
    DATABASE: the benchmark makes databases of its own there, named bench_*), else the
    embedded server started under `home`."""
    return os.environ.get("WL_DATABASE_URL") or start_embedded(home)


async def recreated(admin_url: str, name: str) -> str:
    """Database `name` made anew on the admin URL's server; its URL."""
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(admin_url, name)


@dataclass
class Server:
    """The PostgreSQL server the benchmark runs against, and the CPU its processes use."""

    admin_url: str
    postmaster: psutil.Process | None

    @classmethod
    async def attach(cls, admin_url: str) -> Server:
        conn = await asyncpg.connect(admin_url)
        try:
            backend_pid = await conn.fetchval("SELECT pg_backend_pid()")
            # Looked up while the backend lives: its parent is the postmaster.
            try:
                postmaster = psutil.Process(backend_pid).parent()
                if postmaster is not None and "postgres" not in postmaster.name():
                    postmaster = None  # the pid belongs to a remote server, not to us
            except psutil.Error:
                postmaster = None  # a remote server: its CPU is not ours to read
        finally:
            await conn.close()
        return cls(admin_url, postmaster)

    def cpu_seconds(self) -> float | None:
        """CPU time of the postmaster and every backend, including exited ones."""
        if self.postmaster is None:
            return None
        return process_tree_cpu(self.postmaster)

    async def settings(self) -> dict[str, str]:
        names = [
            "server_version",
            "max_connections",
            "shared_buffers",
            "synchronous_commit",
            "fsync",
            "full_page_writes",
            "wal_level",
            "checkpoint_timeout",
            "max_wal_size",
            "work_mem",
            "autovacuum",
            "autovacuum_naptime",
            "autovacuum_vacuum_scale_factor",
            "jit",
        ]
        conn = await asyncpg.connect(self.admin_url)
        try:
            rows = await conn.fetch(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1)", names
            )
        finally:
            await conn.close()
        return {r["name"]: r["setting"] + (r["unit"] or "") for r in rows}

    async def migrated_database(self, name: str) -> str:
        """Create database `name` with the ledger's schema (a template, or the database a
        script measures in); its URL."""
        from work_ledger.runtime import migrate_database

        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        url = with_database(self.admin_url, name)
        await migrate_database(url)
        return url

    @contextlib.asynccontextmanager
    async def fresh_database(self, prefix: str, template: str | None = None) -> AsyncIterator[str]:
        """A new database for one measurement, dropped afterwards."""
        name = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            clause = f' TEMPLATE "{template}"' if template else ""
            await conn.execute(f'CREATE DATABASE "{name}"{clause}')
        finally:
            await conn.close()
        try:
            yield with_database(self.admin_url, name)
        finally:
            conn = await asyncpg.connect(self.admin_url)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()


def process_tree_cpu(root: psutil.Process) -> float:
    """user+system CPU seconds of `root`, its live descendants and its reaped children."""
    try:
        times = root.cpu_times()
    except psutil.Error:
        return 0.0
    total = times.user + times.system + times.children_user + times.children_system
    for child in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            total += t.user + t.system
    return total


def own_cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all cores, every process)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


@dataclass
class CpuSnapshot:
    client: float
    server: float | None
    app: float | None
    machine: float
    wall: float

    @classmethod
    def take(cls, server: Server, app: psutil.Process | None) -> CpuSnapshot:
        return cls(
            own_cpu_seconds(),
            server.cpu_seconds(),
            None if app is None else process_tree_cpu(app),
            machine_busy_seconds(),
            time.perf_counter(),
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass
class Sample:
    """One timed window of one configuration at one concurrency."""

    items: int
    seconds: float
    latencies: list[float] = field(repr=False)
    cpu: dict[str, float | None]
    exhausted: bool
    first_use: float  # seconds until every worker had finished its first operation

    def summary(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies]

        def per_item(seconds: float | None) -> float | None:
            return None if seconds is None or not self.items else seconds / self.items * 1000

        return {
            "items": self.items,
            "seconds": round(self.seconds, 3),
            "items_per_s": self.items / self.seconds if self.seconds else 0.0,
            "claim_p50_ms": percentile(ms, 50),
            "claim_p99_ms": percentile(ms, 99),
            "client_cpu_pct": self.cpu["client_pct"],
            "server_cpu_pct": self.cpu["server_pct"],
            "app_cpu_pct": self.cpu["app_pct"],
            "other_cpu_pct": self.cpu["other_pct"],
            "client_cpu_ms_per_item": per_item(self.cpu["client_s"]),
            "server_cpu_ms_per_item": per_item(self.cpu["server_s"]),
            "app_cpu_ms_per_item": per_item(self.cpu["app_s"]),
            "first_use_s": round(self.first_use, 3),
            "backlog_exhausted": self.exhausted,
        }


def cpu_delta(a: CpuSnapshot, b: CpuSnapshot) -> dict[str, float | None]:
    wall = b.wall - a.wall

    def d(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else y - x

    client, server, app = d(a.client, b.client), d(a.server, b.server), d(a.app, b.app)
    machine = b.machine - a.machine
    other = machine - (client or 0) - (server or 0) - (app or 0)

    def pct(x: float | None) -> float | None:
        return None if x is None else round(100 * x / wall, 1)

    return {
        "client_s": client,
        "server_s": server,
        "app_s": app,
        "client_pct": pct(client),
        "server_pct": pct(server),
        "app_pct": pct(app),
        "other_pct": pct(max(0.0, other)),
    }


FIRST_USE_TIMEOUT = 120.0

# An operation does one item of work and returns how long its claim took (seconds), or
# None when there was nothing left to claim.
Operation = Callable[[], Awaitable[float | None]]


async def measure(
    operations: Sequence[Operation],
    *,
    server: Server,
    warmup: float,
    duration: float,
    app: psutil.Process | None = None,
) -> Sample:
    """Run each operation in its own closed loop; time a window after the warm-up.

    The warm-up starts once every worker has finished one operation: a connection's first
    use of a statement prepares it and lets asyncpg introspect the types it returns (the
    ledger's composite rows, PGQueuer's enums), a one-time cost per connection that at
    c=256 on two cores would otherwise fill the whole window.
    """
    done: list[tuple[float, float]] = []  # (finished at, claim latency)
    stop = asyncio.Event()
    exhausted = asyncio.Event()
    first_done = 0
    all_warm = asyncio.Event()

    async def worker(op: Operation) -> None:
        nonlocal first_done
        first = True
        while not stop.is_set():
            latency = await op()
            if first:
                first = False
                first_done += 1
                if first_done == len(operations):
                    all_warm.set()
            if latency is None:
                exhausted.set()
                await asyncio.sleep(0.001)
                continue
            done.append((time.perf_counter(), latency))

    tasks = [asyncio.create_task(worker(op)) for op in operations]
    began = time.perf_counter()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_warm.wait(), FIRST_USE_TIMEOUT)
        first_use = time.perf_counter() - began
        await asyncio.sleep(warmup)
        start = CpuSnapshot.take(server, app)
        await asyncio.sleep(duration)
        end = CpuSnapshot.take(server, app)
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    window = [lat for t, lat in done if start.wall <= t <= end.wall]
    return Sample(
        len(window),
        end.wall - start.wall,
        window,
        cpu_delta(start, end),
        exhausted.is_set(),
        first_use,
    )


def median_of(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The per-figure median across repetitions (each figure on its own)."""
    merged: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples if s[key] is not None]
        if key == "backlog_exhausted":
            merged[key] = any(s[key] for s in samples)
        elif not values:
            merged[key] = None
        elif isinstance(values[0], bool):
            merged[key] = any(values)
        else:
            merged[key] = statistics.median(values)
    return merged


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, seconds: float = 60.0) -> None:
    """Return once something listens on `port` of this machine."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


async def gather_limited(coros: Sequence[Awaitable[Any]], limit: int = 32) -> list[Any]:
    """`asyncio.gather`, at most `limit` at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> Any:
        async with gate:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))
