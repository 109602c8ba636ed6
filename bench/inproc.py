"""The request path's own CPU, in process: claim, start and release through the ASGI app
called directly (no sockets, no uvicorn), on the direct path or on FastAPI's (not part of
run.py).

    uv run --group bench python bench/inproc.py [seconds=5] [workers=16] [direct|fastapi] [profile]

Starts its own embedded PostgreSQL, seeds 30,000 units, builds the real app with
`create_app` and drives it from `workers` tasks; prints the process CPU per life (three
requests, the client side included) on stderr and, with `profile`, cProfile's top
functions. The access lines go to stdout, as serve's do: redirect it. The
A/B that chose the direct path ran `direct` and `fastapi` alternately (bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
import httpbench
from claims import seed_ledger
from harness import Server, start_embedded

from work_ledger.api.app import create_app
from work_ledger.api.direct import DirectRoutes
from work_ledger.api.middleware import configure_logging
from work_ledger.config import Settings


def _scope(method: str, path: str, token: str, body: bytes) -> dict[str, Any]:
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
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 4001),
        "state": {},
    }


async def _call(app: Any, path: str, token: str, body: bytes) -> tuple[int, bytes]:
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

    await app(_scope("POST", path, token, body), receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


async def _lives(app: Any, token: str, until: float) -> int:
    lives = 0
    while time.monotonic() < until:
        _, claimed = await _call(app, "/units/claim", token, b"{}")
        answer = json.loads(claimed)
        unit, attempt = answer["unit"]["id"], answer["attempt"]["id"]
        for to in ("in_progress", "ready"):
            body = json.dumps({"to": to, "attempt_id": attempt}).encode()
            status, _ = await _call(app, f"/units/{unit}/transition", token, body)
            assert status == 200, status
        lives += 1
    return lives


async def main(seconds: float, workers: int, path: str, profile: bool) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-inproc-"))
    server = await Server.attach(start_embedded(home / "pg"))
    tokens = await httpbench.build_token_template(server, workers, home)
    async with server.fresh_database("inproc", httpbench.TEMPLATE) as url:
        conn = await asyncpg.connect(url)
        await seed_ledger(conn, 30_000)
        await conn.close()
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
        if path == "fastapi":  # every request down FastAPI's routing and dependency solving
            app.user_middleware = [m for m in app.user_middleware if m.cls is not DirectRoutes]
        async with app.router.lifespan_context(app):
            await asyncio.gather(*(_lives(app, t, time.monotonic() + 1) for t in tokens))
            profiler = cProfile.Profile()
            cpu = time.process_time()
            if profile:
                profiler.enable()
            until = time.monotonic() + seconds
            lives = sum(await asyncio.gather(*(_lives(app, t, until) for t in tokens)))
            profiler.disable()
            cpu = time.process_time() - cpu
    print(
        f"{path}: {lives} lives in {seconds:g} s; CPU per life {cpu / lives * 1000:.2f} ms",
        file=sys.stderr,
    )
    if profile:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(50)
        print(text.getvalue(), file=sys.stderr)


if __name__ == "__main__":
    argv = sys.argv[1:]
    asyncio.run(
        main(
            float(argv[0]) if argv else 5.0,
            int(argv[1]) if len(argv) > 1 else 16,
            argv[2] if len(argv) > 2 else "direct",
            len(argv) > 3 and argv[3] == "profile",
        )
    )
