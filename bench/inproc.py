"""The request path's own CPU, in process: claim then start (the HTTP section's
claim+start, each by a sub-agent of its own) through an ASGI app called directly (no
sockets, no uvicorn): serve's app as `create_app` builds it, or the bare app
(`asgi_raw.py`) that the HTTP section measures serve against (not part of run.py).

    uv run --group bench python -m bench.inproc [seconds=5] [workers=16] \\
        [serve|bare] [profile]

Starts its own embedded PostgreSQL, seeds 30,000 units, builds the real app with
`create_app` (or the bare app over a pool of the same size) and drives it from `workers`
tasks; prints the process CPU per claim+start (two requests, the client side included)
on stderr and, with `profile`, cProfile's top functions by CPU time. The access lines go
to stdout, as serve's do: redirect it. Run the modes one after another in one session and
compare their ratio: the figures move with the machine's load.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import itertools
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import asgi_raw, httpbench
from bench.claims import seed_ledger
from bench.harness import Server, start_embedded
from work_ledger.api.access_log import configure_logging
from work_ledger.api.app import create_app
from work_ledger.config import Settings

_ITEMS = itertools.count()


def _scope(method: str, path: str, token: str, body: bytes, agent: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"x-wl-agent", agent.encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 4001),
        "state": {},
    }


async def _call(app: Any, path: str, token: str, body: bytes, agent: str) -> tuple[int, bytes]:
    sent = False
    out: list[Any] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        out.append(message)

    await app(_scope("POST", path, token, body, agent), receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


async def _claim_starts(app: Any, i: int, token: str, until: float) -> int:
    done = 0
    while time.monotonic() < until:
        agent = f"bench-agent-{i}/{next(_ITEMS)}"  # as httpbench's: a sub-agent per item
        _, claimed = await _call(app, "/units/claim", token, b"{}", agent)
        answer = json.loads(claimed)
        unit, attempt = answer["unit"]["id"], answer["attempt"]["id"]
        body = json.dumps({"to": "in_progress", "attempt_id": attempt}).encode()
        status, _ = await _call(app, f"/units/{unit}/transition", token, body, agent)
        assert status == 200, status
        done += 1
    return done


async def _drive(app: Any, tokens: list[str], seconds: float, profile: bool) -> None:
    """Warm up for a second, then run `seconds`; print the CPU per claim+start."""
    await asyncio.gather(
        *(_claim_starts(app, i, t, time.monotonic() + 1) for i, t in enumerate(tokens))
    )
    # CPU time, not wall time: the loop's waits on PostgreSQL are not the app's cost.
    profiler = cProfile.Profile(time.process_time)
    cpu = time.process_time()
    if profile:
        profiler.enable()
    until = time.monotonic() + seconds
    done = sum(
        await asyncio.gather(*(_claim_starts(app, i, t, until) for i, t in enumerate(tokens)))
    )
    profiler.disable()
    cpu = time.process_time() - cpu
    print(
        f"{done} claim+start in {seconds:g} s; CPU per claim+start {cpu / done * 1000:.3f} ms",
        file=sys.stderr,
    )
    if profile:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(50)
        stats.sort_stats("tottime").print_stats(40)
        print(text.getvalue(), file=sys.stderr)


async def main(seconds: float, workers: int, path: str, profile: bool) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-inproc-"))
    server = await Server.attach(start_embedded(home / "pg"))
    tokens = await httpbench.build_token_template(server, workers, home)
    async with server.fresh_database("inproc", httpbench.TEMPLATE) as url:
        conn = await asyncpg.connect(url)
        await seed_ledger(conn, 30_000)
        await conn.close()
        print(f"{path}: ", end="", file=sys.stderr)
        if path == "bare":
            asgi_raw._pool = await asyncpg.create_pool(
                url, min_size=1, max_size=httpbench.POOL_SIZE_BARE
            )
            try:
                await _drive(asgi_raw.app, tokens, seconds, profile)
            finally:
                await asgi_raw._pool.close()
            return
        settings = Settings(
            database_url=url,
            home=home,
            lease_seconds=900,
            stall_seconds=None,
            evidence_allowed_prefixes=(),
            url="",
            token=None,
            secret=httpbench.SECRET,
        )
        configure_logging()  # serve's JSON access lines (on stdout, as serve writes them)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            await _drive(app, tokens, seconds, profile)


if __name__ == "__main__":
    argv = sys.argv[1:]
    asyncio.run(
        main(
            float(argv[0]) if argv else 5.0,
            int(argv[1]) if len(argv) > 1 else 16,
            argv[2] if len(argv) > 2 else "serve",
            len(argv) > 3 and argv[3] == "profile",
        )
    )
