"""Slow and stuck clients (slowloris sockets, slow bodies, long-polls) do not starve others.

The proof is an order of events: a normal agent's whole life on ten units is served while
every slow socket is still dribbling its request and every long-poll is still waiting.
How fast it was served is printed, not asserted (speed belongs in bench/)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time

import httpx
import pytest

from support.served import StartServer, client, mint
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
SLOW_SOCKETS = 30
LONG_POLLS = 24  # more than the server's pooled database connections
MAX_SECONDS = 20.0  # no request of the normal agent may take this long (10x the old bound)


async def _slowloris(
    port: int, stop: asyncio.Event, token: str, body: bool, dribbling: list[int]
) -> int:
    """Send a request one byte every 100 ms: its headers, or (body) its body."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    dribbling.append(port)
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
    """Wait (60 s at most) for an open question or for a unit of domain `bait`."""
    if k % 2:
        response = await http.get("/questions", params={"status": "open", "wait_seconds": 60})
    else:
        response = await http.post(
            "/units/claim",
            json={"wait_seconds": 60, "domain": "bait"},
            headers={"X-WL-Agent": f"poller/{k}"},
        )
    return response.status_code


async def _answer_long_polls(http: httpx.AsyncClient, operator: httpx.AsyncClient) -> None:
    """A bait unit for each claiming poll, and an open question for the listing ones."""
    baits = [{"external_ref": f"bait-{k}", "fleet": "f", "domain": "bait"} for k in range(24)]
    asking = {"external_ref": "ask", "fleet": "f"}
    assert (await operator.post("/units", json={"units": [*baits, asking]})).status_code == 200
    assert (await http.post("/units/ask/claim", json={})).status_code == 200
    assert (await http.post("/units/ask/transition", json={"to": "in_progress"})).is_success
    assert (await http.post("/units/ask/block", json={"question": "go?"})).status_code == 201


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
        stop, dribbling, sent_polls = asyncio.Event(), [], []
        attackers = [
            asyncio.create_task(
                _slowloris(server.port, stop, slow, body=k % 2 == 1, dribbling=dribbling)
            )
            for k in range(SLOW_SOCKETS)
        ]
        polling.event_hooks["request"] = [lambda request: _count(sent_polls)]
        polls = [asyncio.create_task(_long_poll(polling, k)) for k in range(LONG_POLLS)]
        async with asyncio.timeout(60):
            while len(dribbling) < SLOW_SOCKETS or len(sent_polls) < LONG_POLLS:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        under_attack = await _timed_work(http, op, "siege-")
        still_dribbling = sum(not a.done() for a in attackers)
        still_polling = sum(not p.done() for p in polls)
        stop.set()
        sent = await asyncio.gather(*attackers)
        await _answer_long_polls(http, op)
        polled = await asyncio.gather(*polls)
    print(
        f"\nbaseline: median {statistics.median(baseline) * 1000:.0f} ms, max "
        f"{max(baseline) * 1000:.0f} ms; with {SLOW_SOCKETS} slow sockets ({sum(sent)} bytes "
        f"dribbled) and {LONG_POLLS} long-polls: median "
        f"{statistics.median(under_attack) * 1000:.0f} ms, max {max(under_attack) * 1000:.0f} ms"
    )
    assert (still_dribbling, still_polling) == (SLOW_SOCKETS, LONG_POLLS)
    assert max(under_attack) < MAX_SECONDS
    assert set(polled) == {200}  # the long-polls were answered once released, not dropped


async def _count(seen: list[int]) -> None:
    seen.append(1)
