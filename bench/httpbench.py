"""HTTP: `work-ledger serve` against a bare ASGI app running the hand-written statements
(`bare_app`) and against FastAPI's floor (`floor_app`), same requests, same client; and
the A/B mode (`bench.run --against REV`), two builds of serve on one database in
alternating windows."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from fastapi import FastAPI, Request, Response

from bench.claims import EVIDENCE, LEASE_SECONDS, RAW, seed_ledger, set_up
from bench.harness import (
    BIN,
    TOKENS_TEMPLATE,
    MiniHttp,
    Operation,
    Server,
    app_process,
    build_token_template,
    deepening,
    measure,
    repetitions,
    server_url,
)
from work_ledger.config import DEFAULT_POOL_SIZE

HERE = Path(__file__).resolve().parent

# -- the bare app: no framework, no auth, no validation beyond what the SQL needs ------------

_pool: asyncpg.Pool | None = None


async def _route(path: str, agent: str, body: dict[str, Any]) -> Any:
    assert _pool is not None
    parts = path.strip("/").split("/")
    if parts == ["units", "claim"]:
        row = await _pool.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
        if row is None:
            return {"unit": None, "attempt": None, "resumed": False}
        unit = {"id": str(row["unit_id"]), "state": "claimed", "claimed_by": agent}
        attempt = {"id": str(row["attempt_id"]), "unit_id": str(row["unit_id"])}
        return {"unit": unit, "attempt": attempt, "resumed": False}
    if parts == ["healthz"]:
        return {"status": "ok"}
    target = uuid.UUID(parts[1])
    if parts[0] == "attempts":  # /attempts/{id}/cost
        await _pool.execute(RAW["ledger_cost"], target, agent, body["cost_cents"])
        return {"attempt": {"id": parts[1]}}
    attempt = uuid.UUID(body["attempt_id"])
    if parts[-1] == "dispose":
        await _pool.execute(RAW["ledger_dispose"], target, attempt, agent)
        return {"unit": {"id": parts[1], "state": "done"}}
    if body["to"] == "in_progress":  # /units/{id}/transition
        await _pool.execute(RAW["ledger_finish"], target, attempt, agent)
    else:
        await _pool.execute(RAW["ledger_verify"], target, attempt, agent, body["evidence_url"])
    return {"unit": {"id": parts[1]}, "attempt": {"id": body["attempt_id"]}}


async def _open_pool() -> asyncpg.Pool:
    size = int(os.environ.get("WL_POOL_SIZE") or DEFAULT_POOL_SIZE)  # serve's
    return await asyncpg.create_pool(os.environ["WL_DATABASE_URL"], min_size=1, max_size=size)


def _answer(scope: Any, raw: bytes) -> Awaitable[Any]:
    """The agent is X-WL-Agent when sent, else the bearer token itself (a token is a name)."""
    headers = dict(scope["headers"])
    agent = headers.get(b"x-wl-agent") or headers.get(b"authorization", b"Bearer -").split()[-1]
    return _route(scope["path"], agent.decode(), json.loads(raw) if raw else {})


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floor an HTTP claim can reach: the paths and bodies the benchmark sends to serve."""
    global _pool
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            _pool = await _open_pool()
            await send({"type": "lifespan.startup.complete"})
        if _pool is not None:
            await _pool.close()
        await send({"type": "lifespan.shutdown.complete"})
        return
    raw = b""
    while (message := await receive()).get("more_body"):
        raw += message.get("body", b"")
    raw += message.get("body", b"")
    data = json.dumps(await _answer(scope, raw)).encode()
    length = str(len(data)).encode()
    headers_out = [(b"content-type", b"application/json"), (b"content-length", length)]
    await send({"type": "http.response.start", "status": 200, "headers": headers_out})
    await send({"type": "http.response.body", "body": data})


@contextlib.asynccontextmanager
async def _floor_pool(app: FastAPI) -> AsyncIterator[None]:
    global _pool
    async with await _open_pool() as _pool:
        yield


# FastAPI's floor: the bare app behind FastAPI routes as its documentation writes them (a
# Request in, a Response out); no middleware, authentication or validation.
floor_app = FastAPI(lifespan=_floor_pool)


@floor_app.get("/healthz")
@floor_app.post("/units/claim")
@floor_app.post("/units/{unit}/transition")
@floor_app.post("/units/{unit}/dispose")
@floor_app.post("/attempts/{attempt}/cost")
async def _floor(request: Request) -> Response:
    answer = await _answer(request.scope, await request.body())
    return Response(json.dumps(answer), media_type="application/json")


# -- the loops ------------------------------------------------------------------------------


def _ids(claim: Any) -> tuple[str, str] | None:
    if not claim or claim.get("unit") is None:
        return None
    return claim["unit"]["id"], claim["attempt"]["id"]


def _key(keyed: bool) -> str:
    """A fresh Idempotency-Key header per write, as the SDK sends (or none)."""
    return f"Idempotency-Key: {uuid.uuid4()}\r\n" if keyed else ""


def claim_start_ops(clients: list[MiniHttp], keyed: bool = False) -> list[Operation]:
    """Claim, then start; each item by a sub-agent of its own (X-WL-Agent), named for this
    window: a sub-agent of an earlier window on the same database would get its unit back."""
    window = uuid.uuid4().hex[:6]

    def op_for(i: int, client: MiniHttp) -> Operation:
        counter = itertools.count()

        async def op() -> float | None:
            sub = f"X-WL-Agent: bench-agent-{i}/{window}-{next(counter)}\r\n"
            t0 = time.perf_counter()
            ids = _ids(await client.post("/units/claim", {}, sub + _key(keyed)))
            latency = time.perf_counter() - t0
            if ids is None:
                return None
            start = {"to": "in_progress", "attempt_id": ids[1]}
            await client.post(f"/units/{ids[0]}/transition", start, sub + _key(keyed))
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
EXTRA_SEED = {"http_claim_budget": BUDGETS, "http_claim_controls": RAW["ledger_controls_seed"]}
KEYED = ", each with a fresh Idempotency-Key, as the SDK sends"
CLAIM = "2 requests, 2 commits: POST /units/claim, then /units/{id}/transition to in_progress "
LIFE = "5 requests, 5 commits: claim, start, cost, verify, dispose MIGRATED "
KEYED_CLAIM, KEYED_LIFE = partial(claim_start_ops, keyed=True), partial(life_ops, keyed=True)
# name: (app, operations, backlog, what one item's measured loop includes)
CONFIGS: dict[str, tuple[str, Callable[..., list[Operation]], int, str]] = {
    "http_claim": ("serve", claim_start_ops, 20_000, CLAIM + "through `work-ledger serve` "
                   "(token auth, validation, service); a sub-agent per item"),
    "http_claim_keyed": ("serve", KEYED_CLAIM, 20_000, "http_claim" + KEYED),
    "asgi_raw_claim": ("bare", claim_start_ops, 20_000, CLAIM + "to a bare ASGI app: the "
                       "hand-written claim CTE and finish (serve's pool size)"),
    "fastapi_raw_claim": ("floor", claim_start_ops, 20_000, CLAIM + "to the bare app's "
                          "statements behind FastAPI routes (`floor_app`)"),
    "http_claim_budget": ("serve", claim_start_ops, 20_000, "http_claim with 1,000 budgets, a "
                          "fleet-wide and a domain one over the claimed units, far from spent"),
    "http_claim_controls": ("serve", claim_start_ops, 20_000, "http_claim with flow controls "
                            "that stop none of its backlog (raw.sql ledger_controls_seed): a key "
                            "on each claimed unit, 200 other fleets capped, every other one "
                            "paused, 1,000 paused units ahead in the queue"),
    "http_life": ("serve", life_ops, 8_000, LIFE + "through serve; a token per worker"),
    "http_life_keyed": ("serve", KEYED_LIFE, 8_000, "http_life" + KEYED),
    "http_life_by_model": ("serve", partial(life_ops, cost=BY_MODEL), 8_000, "http_life with a "
                           "Claude Code result's cost record: model, four token counts"),
    "asgi_raw_life": ("bare", life_ops, 8_000, LIFE + "to the bare ASGI app"),
}  # fmt: skip


async def run(
    server: Server, args: Any, levels: list[int], tokens: list[str], home: Path
) -> dict[str, Any]:
    async def window(name: str, c: int) -> dict[str, Any]:
        kind, ops_for, backlog, _ = CONFIGS[name]

        async def once(backlog: int) -> dict[str, Any]:
            async with server.fresh_database(name, TOKENS_TEMPLATE) as url:
                seed = await asyncpg.connect(url)
                await seed_ledger(seed, backlog)
                if name in EXTRA_SEED:
                    await set_up(seed, EXTRA_SEED[name])
                await seed.close()
                async with app_process(kind, url, home) as app:
                    clients = [await MiniHttp.open(app.port, t) for t in tokens[:c]]
                    try:
                        timing = {"warmup": args.warmup, "duration": args.duration}
                        sample = await measure(
                            ops_for(clients), server=server, app=app.ps, **timing
                        )
                    finally:
                        for client in clients:
                            await client.close()
                    conn = await asyncpg.connect(server.admin_url)
                    count = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                    connections = await conn.fetchval(count, urlsplit(url).path[1:])
                    await conn.close()
                    rss = round(app.ps.memory_info().rss / 2**20, 1)
            return {**sample, "app_rss_mb": rss, "db_connections": connections}

        return await deepening(backlog // args.backlog_divisor, once)

    measured = await repetitions("http", list(CONFIGS), levels, args.reps, window)
    return {"configs": {name: {"loop": cfg[3]} for name, cfg in CONFIGS.items()}, **measured}


# -- A/B ----------------------------------------------------------------------------------


async def compare(bins: dict[str, Path], c: int, rounds: int, args: Any) -> dict[str, Any]:
    """Rounds of one window against each build, A first in even rounds and B in odd ones,
    so the machine's drift falls on both; the medians and the medians of the same-round
    ratios B/A (the figure to quote on a busy machine)."""
    home = Path(tempfile.mkdtemp(prefix="wl-ab-"))
    figures: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    ops_for = partial(life_ops if args.life else claim_start_ops, keyed=args.keyed)
    try:
        server = await Server.attach(server_url(home / "pg"))
        tokens = await build_token_template(server, c, home)
        async with server.fresh_database("ab", TOKENS_TEMPLATE) as url:
            conn = await asyncpg.connect(url)
            await seed_ledger(conn, 200_000)
            await conn.close()
            async with contextlib.AsyncExitStack() as stack:
                apps = {n: await stack.enter_async_context(app_process("serve", url, home, b))
                        for n, b in bins.items()}  # fmt: skip
                for round_no in range(rounds):
                    for name in ("A", "B") if round_no % 2 == 0 else ("B", "A"):
                        app = apps[name]
                        clients = [await MiniHttp.open(app.port, t) for t in tokens[:c]]
                        f = await measure(ops_for(clients), server=server, warmup=1,
                                          duration=args.duration, app=app.ps)  # fmt: skip
                        for client in clients:
                            await client.close()
                        figures[name].append(f)
                        print(f"c={c} round {round_no} {name}: {f['items_per_s']:.0f}/s, p99 "
                              f"{f['claim_p99_ms']:.1f} ms, app {f['app_cpu_ms_per_item']:.3f} "
                              f"ms/item, {f['app_cpu_pct']:.0f} % busy", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
    keys = ("items_per_s", "claim_p99_ms", "app_cpu_ms_per_item", "app_cpu_pct")
    pairs = list(zip(figures["A"], figures["B"], strict=True))
    ratios = {k: statistics.median(b[k] / a[k] for a, b in pairs if a[k]) for k in keys[:3]}
    for k, ratio in ratios.items():
        print(f"c={c} B/A {k}: median of same-round ratios {ratio:.3f}", flush=True)
    return {
        "c": c,
        "loop": ("life" if args.life else "claim+start") + (", keyed" if args.keyed else ""),
        "builds": {name: str(path) for name, path in bins.items()},
        "median": {n: {k: statistics.median(f[k] for f in fs) for k in keys}
                   for n, fs in figures.items()},
        "b_over_a": ratios,
        "windows": figures,
    }  # fmt: skip


def build(rev: str, source: Path) -> Path:
    """work-ledger at git revision `rev` in a virtual environment of its own; its `bin`."""
    source.mkdir()
    git = ["git", "-C", str(HERE.parent), "archive", rev]
    tree = subprocess.run(git, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=tree, check=True)
    sync = ["uv", "sync", "--frozen", "--all-extras", "--no-dev", "--project", str(source)]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run(sync, check=True, env=env)
    return source / ".venv" / "bin"


async def against(rev: str, args: Any) -> dict[str, Any]:
    """`bench.run --against REV`: REV's build (`git archive`, `uv sync --frozen`) as A, this
    checkout's as B, at each level, 2 x --reps rounds."""
    scratch = Path(tempfile.mkdtemp(prefix="wl-against-"))
    try:
        bins = {"A": build(rev, scratch / "source"), "B": BIN}
        levels = [await compare(bins, c, max(2, 2 * args.reps), args) for c in args.levels]
        return {"rev": rev, "levels": levels}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
