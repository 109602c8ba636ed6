"""Several `work-ledger serve` replicas on one database, and workers that fail over.

`start_replicas(n)` spawns n servers at once (as a deployment starting together would),
each with a WL_HOME of its own and the shared WL_SECRET, then waits until all are ready.
`Failover` is a workload worker's way to them: like the SDK given a URL list, it starts on
its own replica and moves to the next when a connection fails or a replica answers 503.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from support.served import Served, ledger_env
from support.workload import Recorder, Workload

StartReplicas = Callable[..., Awaitable[list[Served]]]


@dataclass(frozen=True)
class Tls:
    """A CA made at test time, and a certificate it signed for 127.0.0.1 and localhost."""

    ca: Path
    cert: Path
    key: Path


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tls:
    """Test-time TLS files; this process (its readiness probes) trusts the CA."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    files = Tls(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key")
    ca.cert_pem.write_to_path(str(files.ca))
    issued.private_key_pem.write_to_path(str(files.key))
    with open(files.cert, "wb") as chain:
        for blob in issued.cert_chain_pems:
            chain.write(blob.bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(files.ca))
    return files


class TlsServed(Served):
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@pytest.fixture
async def start_replicas(database_url: str, tmp_path: Path) -> AsyncIterator[StartReplicas]:
    """Start n `serve` replicas over this test's database at once (serving HTTPS with
    `tls=`); stopped afterwards."""
    started: list[Served] = []

    async def start(count: int, tls: Tls | None = None, **env: str) -> list[Served]:
        if tls is not None:
            env |= {"WL_TLS_CERT": str(tls.cert), "WL_TLS_KEY": str(tls.key)}
        kind = Served if tls is None else TlsServed
        batch = []
        for _ in range(count):
            home = tmp_path / f"replica-{len(started)}"
            home.mkdir()
            server = kind({**ledger_env(database_url, home), **env}, home)
            started.append(server)
            batch.append(server)
            server.spawn()
        for server in batch:
            await server.wait_ready_or_move()
        return batch

    yield start
    for server in started:
        server.stop()


class Failover(httpx.AsyncBaseTransport):
    """Sends each request to the current replica; a failed one moves it to the next."""

    def __init__(self, urls: Sequence[str], first: int) -> None:
        self.urls = [httpx.URL(url) for url in urls]
        self.current = first % len(self.urls)
        self.inner = httpx.AsyncHTTPTransport()
        self.moves: list[tuple[float, str]] = []  # (when, the URL moved away from)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[self.current]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["Host"] = target.netloc.decode()
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError:
            self._move(target)
            raise
        if response.status_code == 503:
            self._move(target)
        return response

    def _move(self, away_from: httpx.URL) -> None:
        if self.urls[self.current] == away_from:
            self.current = (self.current + 1) % len(self.urls)
            self.moves.append((time.monotonic(), str(away_from)))

    async def aclose(self) -> None:
        await self.inner.aclose()


async def through_a_replica_kill(
    workload: Workload,
    victim: Served,
    *,
    kill_after: float,
    rich_enough: Callable[[], Awaitable[bool]],
    seconds: float,
) -> Recorder:
    """Run `workload` until it has recorded `kill_after` requests, SIGKILL `victim` (its
    agents fail over to the other replicas) and restart it; go on until `rich_enough()`
    says the history holds what the checks need, all within `seconds`; then stop."""
    load = asyncio.create_task(workload.run())
    async with asyncio.timeout(seconds):
        while len(workload.recorder.ops) < kill_after:  # noqa: ASYNC110  (a count)
            await asyncio.sleep(0.1)
        victim.kill(signal.SIGKILL)
        await asyncio.sleep(1.5)
        await victim.start()
        while not await rich_enough():  # noqa: ASYNC110  (a database fact)
            await asyncio.sleep(0.2)
    workload.stop.set()
    return await load
