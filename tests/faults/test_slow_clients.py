"""Slow and stuck clients (slowloris sockets, slow bodies, long-polls) do not starve others."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time

import httpx
import pytest
from served import StartServer, client, mint

from work_ledger.auth import Role

pytestmark = pytest.mark.faults
SLOW_SOCKETS = 30
LONG_POLLS = 24  # more than the server's 10 pooled database connections
MAX_SECONDS = 2.0


async def _slowloris(port: int, stop: asyncio.Event, token: str, body: bool) -> int:
    """Send a request one byte every 100 ms: its headers, or (body) its body."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /units/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n"
    ).encode()
    if body:
        writer.write(head)
        head = b'{"lease_seconds": ' + b" " * 99_990
    sent = 0
    try:
        for byte in head:
            if stop.is_set():
                break
            writer.write(bytes([byte]))
            await writer.drain()
            sent += 1
            await asyncio.sleep(0.1)
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return sent


async def _long_poll(http: httpx.AsyncClient, k: int) -> int:
    if k % 2:
        response = await http.get("/questions", params={"status": "open", "wait_seconds": 5})
    else:
        response = await http.post(
            "/units/claim",
            json={"wait_seconds": 5, "domain": "bait"},
            headers={"X-WL-Agent": f"poller/{k}"},
        )
    return response.status_code


async def _timed_work(
    http: httpx.AsyncClient, operator: httpx.AsyncClient, prefix: str
) -> list[float]:
    """A normal agent's life on ten units, each request timed."""
    seconds: list[float] = []

    async def call(method: str, path: str, client_: httpx.AsyncClient, **kw: object) -> dict:
        started = time.monotonic()
        response = await client_.request(method, path, **kw)  # type: ignore[arg-type]
        seconds.append(time.monotonic() - started)
        assert response.status_code < 300, response.text
        return response.json()  # type: ignore[no-any-return]

    for i in range(10):
        await call(
            "POST",
            "/units",
            operator,
            json={"units": [{"external_ref": f"{prefix}{i}", "fleet": "f"}]},
        )
        await call("GET", "/readyz", http)
        claim = await call("POST", f"/units/{prefix}{i}/claim", http, json={"lease_seconds": 60})
        attempt = claim["attempt"]["id"]
        await call("POST", f"/units/{prefix}{i}/transition", http, json={"to": "in_progress"})
        await call("POST", f"/attempts/{attempt}/cost", http, json={"cost_cents": 7})
        await call(
            "POST",
            f"/units/{prefix}{i}/transition",
            http,
            json={"to": "verified", "evidence_url": f"https://ci.example/{i}"},
        )
        await call("POST", f"/units/{prefix}{i}/dispose", http, json={"disposition": "MIGRATED"})
        await call("GET", f"/units/{prefix}{i}", http)
    return seconds


async def test_slow_clients_do_not_starve_others(start_server: StartServer) -> None:
    """30 byte-a-time sockets and 24 long-polls open: a normal agent's requests stay prompt."""
    server = await start_server()
    operator, worker, poller, slow = await mint(
        server.env["WL_DATABASE_URL"],
        [
            (Role.OPERATOR, "op"),
            (Role.AGENT, "worker"),
            (Role.AGENT, "poller"),
            (Role.AGENT, "slow"),
        ],
    )
    async with (
        client(server.url, worker, timeout=30) as http,
        client(server.url, operator, timeout=30) as op,
        client(server.url, poller, timeout=30) as polling,
    ):
        baseline = await _timed_work(http, op, "calm-")
        stop = asyncio.Event()
        attackers = [
            asyncio.create_task(_slowloris(server.port, stop, slow, body=k % 2 == 1))
            for k in range(SLOW_SOCKETS)
        ]
        polls = [asyncio.create_task(_long_poll(polling, k)) for k in range(LONG_POLLS)]
        await asyncio.sleep(1.0)  # let them all get their hooks in
        await op.post(
            "/units", json={"units": [{"external_ref": "bait", "fleet": "f", "domain": "bait"}]}
        )
        assert (await http.get("/units/bait")).status_code == 200
        under_attack = await _timed_work(http, op, "siege-")
        stop.set()
        sent = await asyncio.gather(*attackers)
        polled = await asyncio.gather(*polls)
    print(
        f"\nbaseline: median {statistics.median(baseline) * 1000:.0f} ms, max "
        f"{max(baseline) * 1000:.0f} ms; with {SLOW_SOCKETS} slow sockets ({sum(sent)} bytes "
        f"dribbled) and {LONG_POLLS} long-polls: median "
        f"{statistics.median(under_attack) * 1000:.0f} ms, max {max(under_attack) * 1000:.0f} ms"
    )
    assert max(under_attack) < MAX_SECONDS
    assert set(polled) == {200}  # the long-polls were answered, not dropped
