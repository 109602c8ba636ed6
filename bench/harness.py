"""The measuring machinery every section uses (bench/README.md, "How a figure is taken"),
and the HTTP side: a minimal keep-alive client, `serve` or the bare app, tokens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from work_ledger.db.connect import create_pool, with_database
from work_ledger.runtime import migrate_database

# A claim loop at c=256 needs 256 connections of its own, plus the seeding and metering
# connections; the embedded server's default is 100.
MAX_CONNECTIONS = 600
SECRET = "bench-secret-not-for-production"
TOKENS_TEMPLATE = "bench_tpl_http"
BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent
# serve's own connections (it names itself work-ledger), not the benchmark's.
CONNECTIONS = (
    "SELECT count(*) AS open, count(*) FILTER (WHERE state <> 'idle') AS busy "
    "FROM pg_stat_activity WHERE datname = $1 AND application_name = 'work-ledger'"
)
# Raising max_connections needs a restart: a short-lived process starts the embedded server
# and sets it; when it exits the server stops, and this process starts it again.
_CONFIGURE = f"""
import asyncio, sys
from pathlib import Path
import asyncpg
from work_ledger.embedded.server import embedded_server_url

async def main() -> None:
    conn = await asyncpg.connect(embedded_server_url(Path(sys.argv[1])))
    await conn.execute("ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
    await conn.close()

asyncio.run(main())
"""


def server_url(home: Path) -> str:
    """The admin URL to measure on: WL_DATABASE_URL's (a user who may CREATE DATABASE; the
    benchmark's databases are named bench_*), else the embedded server under `home`."""
    if os.environ.get("WL_DATABASE_URL"):
        return os.environ["WL_DATABASE_URL"]
    from work_ledger.embedded.server import embedded_server_url

    subprocess.run([sys.executable, "-c", _CONFIGURE, str(home)], check=True)
    return embedded_server_url(home)


async def admin_execute(admin_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def recreated(admin_url: str, name: str) -> str:
    """Database `name` made anew on the admin URL's server; its URL."""
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    await admin_execute(admin_url, drop, f'CREATE DATABASE "{name}"')
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
            try:  # looked up while the backend lives: its parent is the postmaster
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
        return None if self.postmaster is None else process_tree_cpu(self.postmaster)

    @contextlib.asynccontextmanager
    async def fresh_database(self, prefix: str, template: str | None = None) -> AsyncIterator[str]:
        """A new database for one measurement, dropped afterwards."""
        name = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
        clause = f' TEMPLATE "{template}"' if template else ""
        await admin_execute(self.admin_url, f'CREATE DATABASE "{name}"{clause}')
        try:
            yield with_database(self.admin_url, name)
        finally:
            await admin_execute(self.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def process_tree_cpu(root: psutil.Process) -> float:
    """user+system CPU seconds of `root`, its live descendants and its reaped children."""
    try:
        t = root.cpu_times()
    except psutil.Error:
        return 0.0
    total = t.user + t.system + t.children_user + t.children_system
    for child in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.cpu_times().user + child.cpu_times().system
    return total


def cpu_now(server: Server, app: psutil.Process | None) -> dict[str, Any]:
    """CPU seconds so far of this process, the server, the app and the whole machine (all
    cores, every process: not idle), and the wall clock."""
    own, busy = psutil.Process().cpu_times(), psutil.cpu_times()
    return {"client": own.user + own.system, "server": server.cpu_seconds(),
            "app": None if app is None else process_tree_cpu(app),
            "machine": sum(busy) - busy.idle - getattr(busy, "iowait", 0.0),
            "wall": time.perf_counter()}  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


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
) -> dict[str, Any]:
    """Run each operation in its own closed loop; time a window after the warm-up: the
    items finished inside it, their claims' latencies, and each party's CPU.

    The warm-up starts once every worker has finished one operation: a connection's first
    use of a statement prepares it and lets asyncpg introspect the types it returns, a
    one-time cost per connection that at c=256 on two cores would fill the whole window.
    """
    done: list[tuple[float, float]] = []  # (finished at, claim latency)
    stop, exhausted, all_warm = asyncio.Event(), asyncio.Event(), asyncio.Event()
    warm = 0

    async def worker(op: Operation) -> None:
        nonlocal warm
        first = True
        while not stop.is_set():
            latency = await op()
            if first:
                first, warm = False, warm + 1
                if warm == len(operations):
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
            await asyncio.wait_for(all_warm.wait(), 120)
        first_use = time.perf_counter() - began
        await asyncio.sleep(warmup)
        start = cpu_now(server, app)
        await asyncio.sleep(duration)
        end = cpu_now(server, app)
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    window = [lat * 1000 for t, lat in done if start["wall"] <= t <= end["wall"]]
    items, seconds = len(window), end["wall"] - start["wall"]
    used = {k: None if start[k] is None or end[k] is None else end[k] - start[k]
            for k in ("client", "server", "app")}  # fmt: skip
    used["other"] = max(0.0, end["machine"] - start["machine"] - sum(v or 0 for v in used.values()))
    return {
        "items": items, "seconds": round(seconds, 3), "items_per_s": items / seconds,
        "claim_p50_ms": percentile(window, 50), "claim_p99_ms": percentile(window, 99),
        **{f"{k}_cpu_pct": None if v is None else round(100 * v / seconds, 1)
           for k, v in used.items()},
        **{f"{k}_cpu_ms_per_item": None if v is None or not items else v / items * 1000
           for k, v in used.items() if k != "other"},
        "first_use_s": round(first_use, 3), "backlog_exhausted": exhausted.is_set(),
    }  # fmt: skip


def median_of(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The per-figure median across repetitions (each figure on its own)."""
    merged: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples if s[key] is not None]
        if not values:
            merged[key] = None
        elif isinstance(values[0], bool):
            merged[key] = any(values)
        else:
            merged[key] = statistics.median(values)
    return merged


async def deepening(backlog: int, window: Callable[[int], Awaitable[dict[str, Any]]]) -> Any:
    """One window's summary; measured again with a doubled backlog while a window runs dry."""
    for _attempt in range(3):
        summary = await window(backlog)
        if not summary["backlog_exhausted"]:
            break
        backlog *= 2
    return {**summary, "backlog": backlog}


async def repetitions(
    section: str, names: Sequence[str], levels: Sequence[int], reps: int,
    window: Callable[[str, int], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:  # fmt: skip
    """Every configuration at every level, each figure the median of the repetitions.
    Repetition outermost, configurations innermost: a burst of load from elsewhere on the
    machine hits every configuration of a repetition alike, so the ratios hold."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in names}
    for rep in range(reps):
        for c in levels:
            for name in names:
                t0 = time.perf_counter()
                s = await window(name, c)
                runs[name].setdefault(str(c), []).append(s)
                shown = {k[:-8]: s.get(k) for k in s if k.endswith("_cpu_pct")}
                print(f"{section} rep {rep + 1} c={c:<3} {name:<30} {s['items_per_s']:>6.0f}/s "
                      f"p50 {s['claim_p50_ms'] or 0:.2f} p99 {s['claim_p99_ms'] or 0:.2f} ms, "
                      f"CPU % {shown} ({time.perf_counter() - t0:.1f}s)", flush=True)  # fmt: skip
    medians = {n: {c: median_of(v) for c, v in by_c.items()} for n, by_c in runs.items()}
    return {"runs": runs, "median": medians}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MiniHttp:
    """One keep-alive HTTP/1.1 connection, JSON in and out: a few lines over asyncio
    streams, so that the client's own cost stays small on two cores."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str):
        self.reader, self.writer = reader, writer
        self.base = f"Authorization: Bearer {token}\r\n" if token else ""

    @classmethod
    async def open(cls, port: int, token: str = "") -> MiniHttp:
        return cls(*await asyncio.open_connection("127.0.0.1", port), token)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def request(
        self, method: str, path: str, payload: Any = None, extra: str = ""
    ) -> tuple[int, Any]:
        body = b"" if payload is None else json.dumps(payload).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self.base}{extra}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        data = await self.reader.readexactly(int(fields["content-length"]))  # never chunked
        return status, (json.loads(data) if data else None)

    async def post(self, path: str, payload: Any, extra: str = "") -> Any:
        status, body = await self.request("POST", path, payload, extra)
        if status >= 300:
            raise RuntimeError(f"POST {path} -> {status}: {body}")
        return body


@dataclass
class AppProcess:
    port: int
    ps: psutil.Process


def wl_env(url: str, home: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, WL_DATABASE_URL=url, WL_HOME=str(home), WL_SECRET=SECRET, **extra)


@contextlib.asynccontextmanager
async def app_process(
    kind: str, url: str, home: Path, bin_dir: Path = BIN, env: dict[str, str] | None = None
) -> AsyncIterator[AppProcess]:
    """`serve` of the environment `bin_dir`, or (kind "bare" or "floor") that app of
    bench/httpbench.py under uvicorn; started, waited for, stopped."""
    port = free_port()
    if kind == "serve":
        cmd = [str(bin_dir / "work-ledger"), "serve", "--port", str(port)]
    else:
        here, app = str(HERE.parent), f"bench.httpbench:{kind}_app"
        cmd = [sys.executable, "-m", "uvicorn", app, "--port", str(port),
               "--app-dir", here, "--loop", "uvloop", "--http", "httptools", "--no-access-log",
               "--log-level", "warning"]  # fmt: skip
    log = (home / f"{kind}-{port}.log").open("ab")  # serve logs every request: not here
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=wl_env(url, home, **(env or {})), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts serve slowly
        while True:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
                probe = await MiniHttp.open(port)
                status, _ = await probe.request("GET", "/healthz")
                await probe.close()
                if status == 200:
                    break
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not start (exit {proc.returncode}, {log.name})")
            await asyncio.sleep(0.2)
        yield AppProcess(port, psutil.Process(proc.pid))
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def mint_token(url: str, home: Path, role: str, principal: str) -> str:
    """A token, minted the documented way (`work-ledger token create`, its last line)."""
    cmd = ["token", "create", "--role", role, "--principal", principal]
    proc = await asyncio.create_subprocess_exec(
        BIN / "work-ledger", *cmd, env=wl_env(url, home), stdout=PIPE, stderr=DEVNULL
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"work-ledger token create exited {proc.returncode}")
    return out.decode().strip().splitlines()[-1]


async def build_token_template(server: Server, agents: int, home: Path) -> list[str]:
    """A migrated template database holding one agent token per worker: the first minted by
    `work-ledger token create`, the rest by the TokenStore.create it calls, in process
    (starting the CLI once per agent would take minutes)."""
    from work_ledger.db.store import Store
    from work_ledger.service.tokens import Role, TokenStore

    url = await recreated(server.admin_url, TOKENS_TEMPLATE)
    await migrate_database(url)
    tokens = [await mint_token(url, home, "agent", "bench-agent-0")]
    pool = await create_pool(url, min_size=1, max_size=1)
    try:
        store = TokenStore(Store(pool), SECRET.encode())
        for i in range(1, agents):
            tokens.append((await store.create(Role.AGENT, f"bench-agent-{i}"))[0])
    finally:
        await pool.close()
    return tokens
