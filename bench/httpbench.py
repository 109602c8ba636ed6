"""HTTP: `work-ledger serve` (a separate process, one token per agent) against a bare ASGI
endpoint (bench/asgi_raw.py under the same uvicorn settings) running the hand-written
statements. Both get the same requests from the same minimal keep-alive HTTP/1.1 client
(a few lines over asyncio streams, so the client's own cost stays small on two cores).
The `_keyed` configurations send what agents send: the SDK puts a fresh Idempotency-Key on
every write (client/_calls.py), which serve runs as a keyed write (docs/request-path.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import psutil

from bench.claims import EVIDENCE, RAW, seed_ledger
from bench.harness import Operation, Server, free_port, measure, median_of, process_tree_cpu
from work_ledger.config import DEFAULT_POOL_SIZE
from work_ledger.db.connect import create_pool, with_database
from work_ledger.runtime import migrate_database

HERE = Path(__file__).resolve().parent
SECRET = "bench-secret-not-for-production"
TEMPLATE = "bench_tpl_http"
# The bare app gets as many database connections as `serve` has for requests.
POOL_SIZE_BARE = int(os.environ.get("WL_POOL_SIZE") or DEFAULT_POOL_SIZE)


class MiniHttp:
    """One keep-alive HTTP/1.1 connection; JSON in, JSON out."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port = port
        self.base = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def request(
        self, method: str, path: str, payload: Any = None, extra: str = ""
    ) -> tuple[int, Any]:
        assert self.reader is not None
        assert self.writer is not None
        body = b"" if payload is None else json.dumps(payload).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self.base}{extra}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        raw_head = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if "content-length" in fields:
            data = await self.reader.readexactly(int(fields["content-length"]))
        else:  # chunked
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return status, (json.loads(data) if data else None)

    async def post(self, path: str, payload: Any, extra: str = "") -> Any:
        status, body = await self.request("POST", path, payload, extra)
        if status >= 300:
            raise RuntimeError(f"POST {path} -> {status}: {body}")
        return body


def process_cpu(app: AppProcess) -> float:
    return process_tree_cpu(app.ps)


@dataclass
class AppProcess:
    process: asyncio.subprocess.Process
    port: int

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.process.pid)


@contextlib.asynccontextmanager
async def app_process(kind: str, url: str, home: Path) -> AsyncIterator[AppProcess]:
    port = free_port()
    env = dict(os.environ)
    env.update(WL_DATABASE_URL=url, WL_HOME=str(home), WL_SECRET=SECRET)
    if kind == "serve":
        cmd = [str(Path(sys.executable).with_name("work-ledger")), "serve", "--port", str(port)]
    else:
        env.update(BENCH_DATABASE_URL=url, BENCH_POOL_SIZE=str(POOL_SIZE_BARE))
        cmd = [
            sys.executable, "-m", "uvicorn", "bench.asgi_raw:app", "--app-dir", str(HERE.parent),
            "--port", str(port), "--loop", "uvloop", "--http", "httptools",
            "--no-access-log", "--log-level", "warning",
        ]  # fmt: skip
    # The app logs every request (its own cost, kept); to a file, not this terminal.
    log = (home / f"{kind}-{port}.log").open("ab")
    proc = await asyncio.create_subprocess_exec(*cmd, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts serve slowly
        while True:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
                probe = MiniHttp(port, {})
                await probe.open()
                status, _ = await probe.request("GET", "/healthz")
                await probe.close()
                if status == 200:
                    break
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not start (exit {proc.returncode})")
            await asyncio.sleep(0.2)
        yield AppProcess(proc, port)
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
    """A token, minted the documented way (`work-ledger token create`)."""
    env = dict(os.environ, WL_DATABASE_URL=url, WL_HOME=str(home), WL_SECRET=SECRET)
    cli = str(Path(sys.executable).with_name("work-ledger"))
    proc = await asyncio.create_subprocess_exec(
        cli, "token", "create", "--role", role, "--principal", principal,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"work-ledger token create exited {proc.returncode}")
    return out.decode().strip().splitlines()[-1]


async def build_token_template(server: Server, agents: int, home: Path) -> list[str]:
    """A migrated template database holding one agent token per worker.

    The first token is minted by `work-ledger token create` (the documented way, token on
    the last stdout line); the rest by the same TokenStore.create the command calls, in
    process, because starting the CLI once per agent would take minutes.
    """
    from work_ledger.db.store import Store
    from work_ledger.service.tokens import Role, TokenStore

    admin = await asyncpg.connect(server.admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
    finally:
        await admin.close()
    url = with_database(server.admin_url, TEMPLATE)
    await migrate_database(url)
    tokens = [await mint_token(url, home, "agent", "bench-agent-0")]
    pool = await create_pool(url, min_size=1, max_size=1)
    try:
        store = TokenStore(Store(pool), SECRET.encode())
        for i in range(1, agents):
            token, _info = await store.create(Role.AGENT, f"bench-agent-{i}")
            tokens.append(token)
    finally:
        await pool.close()
    return tokens


def _ids(claim: Any) -> tuple[str, str] | None:
    if not claim or claim.get("unit") is None:
        return None
    return claim["unit"]["id"], claim["attempt"]["id"]


def _key(keyed: bool) -> str:
    """A fresh Idempotency-Key header per write, as the SDK sends (or none)."""
    return f"Idempotency-Key: {uuid.uuid4()}\r\n" if keyed else ""


def claim_finish_ops(clients: list[MiniHttp], keyed: bool = False) -> list[Operation]:
    """Claim, then start; each item by a sub-agent of its own (X-WL-Agent)."""

    def op_for(i: int, client: MiniHttp) -> Operation:
        counter = iter(range(10**9))

        async def op() -> float | None:
            sub = f"X-WL-Agent: bench-agent-{i}/{next(counter)}\r\n"
            t0 = time.perf_counter()
            ids = _ids(await client.post("/units/claim", {}, sub + _key(keyed)))
            latency = time.perf_counter() - t0
            if ids is None:
                return None
            unit, attempt = ids
            start = {"to": "in_progress", "attempt_id": attempt}
            await client.post(f"/units/{unit}/transition", start, sub + _key(keyed))
            return latency

        return op

    return [op_for(i, c) for i, c in enumerate(clients)]


CENTS_ONLY = {"cost_cents": 125}
# What `run` records from a Claude Code result: one model, four token classes, estimated.
BY_MODEL = {
    "cost_cents": 125,
    "model": "claude-sonnet-4-5-20250929",
    "input_tokens": 31,
    "output_tokens": 3120,
    "cache_read_tokens": 210455,
    "cache_write_tokens": 18234,
    "estimated": True,
}


def life_ops(
    clients: list[MiniHttp], cost: dict[str, Any] = CENTS_ONLY, keyed: bool = False
) -> list[Operation]:
    """Claim, start, cost, verify, dispose MIGRATED; the token's own agent."""

    def op_for(client: MiniHttp) -> Operation:
        async def op() -> float | None:
            t0 = time.perf_counter()
            ids = _ids(await client.post("/units/claim", {}, _key(keyed)))
            latency = time.perf_counter() - t0
            if ids is None:
                return None
            unit, attempt = ids
            for path, body in (
                (f"/units/{unit}/transition", {"to": "in_progress", "attempt_id": attempt}),
                (f"/attempts/{attempt}/cost", cost),
                (
                    f"/units/{unit}/transition",
                    {"to": "verified", "evidence_url": EVIDENCE, "attempt_id": attempt},
                ),
                (f"/units/{unit}/dispose", {"disposition": "MIGRATED", "attempt_id": attempt}),
            ):
                await client.post(path, body, _key(keyed))
            return latency

        return op

    return [op_for(c) for c in clients]


# 998 budgets of other fleets, and a fleet-wide and a domain budget over the seeded fleet,
# far from spent: every claim checks them, none stops it (DESIGN §12, Budgets).
BUDGETS = """
INSERT INTO budgets (fleet, domain, cap_cents)
SELECT 'other-' || i, NULL, 100 FROM generate_series(1, 998) AS i
UNION ALL SELECT 'bench', NULL, 1000000000000
UNION ALL SELECT 'bench', domain, 1000000000000 FROM (SELECT DISTINCT domain FROM work_units) AS d
"""
# What a window's database gets beside its backlog.
EXTRA_SEED = {"http_claim_budget": BUDGETS, "http_claim_controls": RAW["ledger_controls_seed"]}

CLAIM_LOOP = "2 requests, 2 commits: POST /units/claim, then POST /units/{id}/transition to "
LIFE_LOOP = "5 requests, 5 commits: claim, start, cost, verify, dispose MIGRATED "
KEYED = ", each with a fresh Idempotency-Key, as the SDK sends"
# name: (app, operations, backlog, what one item's measured loop includes)
CONFIGS = {
    "http_claim": ("serve", claim_finish_ops, 20_000, CLAIM_LOOP + "in_progress through "
                   "`work-ledger serve` (token auth, validation, service); a sub-agent per item"),
    "http_claim_keyed": ("serve", partial(claim_finish_ops, keyed=True), 20_000,
                         "http_claim" + KEYED),
    "asgi_raw_claim": ("bare", claim_finish_ops, 20_000, CLAIM_LOOP + "in_progress to a bare "
                       "ASGI app: the hand-written claim CTE and finish (serve's pool size)"),
    "http_claim_budget": ("serve", claim_finish_ops, 20_000, "http_claim with 1,000 budgets, "
                          "a fleet-wide and a domain one over the claimed units, far from spent"),
    "http_claim_controls": ("serve", claim_finish_ops, 20_000, "http_claim with flow controls "
                            "that stop none of its backlog (raw.sql ledger_controls_seed): a key "
                            "on each claimed unit, 200 other fleets capped, every other one "
                            "paused, 1,000 paused units ahead in the queue"),
    "http_life": ("serve", life_ops, 8_000, LIFE_LOOP + "through serve; a token per worker"),
    "http_life_keyed": ("serve", partial(life_ops, keyed=True), 8_000, "http_life" + KEYED),
    "http_life_by_model": ("serve", partial(life_ops, cost=BY_MODEL), 8_000, "http_life with a "
                           "Claude Code result's cost record: model, four token counts"),
    "asgi_raw_life": ("bare", life_ops, 8_000, LIFE_LOOP + "to the bare ASGI app"),
}  # fmt: skip


async def one_window(
    server: Server, name: str, c: int, tokens: list[str], args: Any, home: Path
) -> dict[str, Any]:
    kind, ops_for, backlog, _ = CONFIGS[name]
    backlog //= args.backlog_divisor
    for _attempt in range(3):
        async with server.fresh_database(name, TEMPLATE) as url:
            seed = await asyncpg.connect(url)
            try:
                await seed_ledger(seed, backlog)
                if name in EXTRA_SEED:
                    await seed.execute(EXTRA_SEED[name])
            finally:
                await seed.close()
            async with app_process(kind, url, home) as app:
                clients = [MiniHttp(app.port, {"Authorization": f"Bearer {t}"}) for t in tokens[:c]]
                try:
                    for client in clients:
                        await client.open()
                    sample = await measure(
                        ops_for(clients),
                        server=server,
                        warmup=args.warmup,
                        duration=args.duration,
                        app=app.ps,
                    )
                    summary = sample.summary()
                    summary["app_rss_mb"] = round(app.ps.memory_info().rss / 2**20, 1)
                    summary["db_connections"] = await _connections(server, url)
                finally:
                    for client in clients:
                        await client.close()
        if not sample.exhausted:
            break
        backlog *= 2
    summary["backlog"] = backlog
    return summary


async def _connections(server: Server, url: str) -> int:
    conn = await asyncpg.connect(server.admin_url)
    try:
        name = urlsplit(url).path.lstrip("/")
        return int(
            await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name)
        )
    finally:
        await conn.close()


async def run(
    server: Server, args: Any, levels: list[int], tokens: list[str], home: Path
) -> dict[str, Any]:

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in CONFIGS}
    for rep in range(args.reps):
        for c in levels:
            for name in CONFIGS:
                s = await one_window(server, name, c, tokens, args, home)
                runs[name].setdefault(str(c), []).append(s)
                print(
                    f"http rep {rep + 1} c={c:<3} {name:<16} {s['items_per_s']:>7.0f}/s "
                    f"p50 {s['claim_p50_ms']:.2f} p99 {s['claim_p99_ms']:.2f} ms "
                    f"cpu client {s['client_cpu_pct']}% app {s['app_cpu_pct']}% "
                    f"server {s['server_cpu_pct']}% other {s['other_cpu_pct']}% "
                    f"conns {s['db_connections']} rss {s['app_rss_mb']} MB",
                    flush=True,
                )
    return {
        "configs": {name: {"loop": cfg[3]} for name, cfg in CONFIGS.items()},
        "runs": runs,
        "median": {name: {c: median_of(v) for c, v in by_c.items()} for name, by_c in runs.items()},
    }
