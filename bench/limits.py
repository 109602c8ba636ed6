"""Limits before work, measured against a running `work-ledger serve` (not part of run.py).

    uv run --group bench python -m bench.limits [stalled=1000]

Starts its own embedded PostgreSQL and serve, then:
1. opens `stalled` connections that send nothing, half a header or half a body, and while
   they are held times GET /healthz from a fresh client; then waits until the server has
   closed every one of them and reports the slowest close;
2. sends an oversized header, a 100,000-deep JSON body and an anonymous malformed body and
   counts 5xx answers;
3. sends four 64 MiB header lines at once and reports serve's RSS before and after.
Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import httpbench
from bench.harness import Server, server_url

STALLS = (
    b"",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
)


async def _status(port: int, raw: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    except (ConnectionError, TimeoutError):
        line = b""
    writer.close()
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0


async def _held(port: int, sent: bytes) -> float:
    """Seconds until the server closes a connection that sent `sent` and stopped."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sent)
    began = time.monotonic()
    with contextlib.suppress(ConnectionError):
        await asyncio.wait_for(reader.read(), 120)
    writer.close()
    return time.monotonic() - began


async def _healthz_ms(port: int) -> float:
    began = time.monotonic()
    status = await _status(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200, status
    return (time.monotonic() - began) * 1000


async def main(stalled: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-limits-"))
    server = await Server.attach(server_url(home / "pg"))
    await httpbench.build_token_template(server, 1, home)
    out: dict[str, Any] = {"stalled": stalled}
    async with (
        server.fresh_database("limits", httpbench.TEMPLATE) as url,
        httpbench.app_process("serve", url, home) as app,
    ):
        held = [asyncio.create_task(_held(app.port, STALLS[i % 3])) for i in range(stalled)]
        await asyncio.sleep(1)
        out["healthz_ms_while_held"] = round(await _healthz_ms(app.port), 1)
        closes = await asyncio.gather(*held)
        out["slowest_close_s"] = round(max(closes), 1)
        statuses = [
            await _status(
                app.port, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n"
            ),
            await _status(
                app.port,
                b"POST /units/claim HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"
                + b"[" * 100_000
                + b"]" * 100_000,
            ),
            await _status(
                app.port, b"POST /units HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{nope"
            ),
        ]
        out["statuses"] = statuses
        out["answers_5xx"] = sum(1 for s in statuses if s >= 500)
        out["rss_mb_before_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
        flood = b"GET /healthz HTTP/1.1\r\nX-Flood: " + b"f" * (64 * 2**20)
        await asyncio.gather(*(_status(app.port, flood) for _ in range(4)))
        out["rss_mb_after_flood"] = round(app.ps.memory_info().rss / 2**20, 1)
    return out


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(json.dumps(asyncio.run(main(count))))
