"""A real work-ledger server in a thread of its own, for the SDK, CLI and MCP tests.

The server runs its own event loop in a background thread, so sync clients (the SDK's
`Client`, the CLI, subprocesses) can call it from the test's thread without blocking it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
import uvicorn

from support import served_app
from work_ledger.api.app import create_app
from work_ledger.config import Settings

SECRET = "agent-toolkit-test-secret"


@dataclass
class LedgerServer:
    """A running server: its URL, and a way to mint tokens on it."""

    url: str
    settings: Settings
    server: uvicorn.Server
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    minted: dict[tuple[str, str], str] = field(default_factory=dict)

    def token(self, role: str, principal: str) -> str:
        """A token for (role, principal), minted once per server."""
        if (role, principal) not in self.minted:
            tokens = self.server.config.app.state.tokens  # type: ignore[attr-defined]
            done: Future[Any] = asyncio.run_coroutine_threadsafe(
                tokens.create(role, principal), self.loop
            )
            self.minted[role, principal] = done.result(timeout=30)[0]
        return self.minted[role, principal]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@contextmanager
def quiet_access_log() -> Iterator[None]:
    """Send the in-process server's access log to /dev/null, not to the CLI's captured stdout."""
    saved = structlog.get_config()
    with open(os.devnull, "w") as sink:
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sink))
        try:
            yield
        finally:
            structlog.configure(**saved)


def settings_for(database_url: str, home: Path, lease_seconds: int = 60) -> Settings:
    return served_app.settings_for(database_url, home, secret=SECRET, lease_seconds=lease_seconds)


def start(settings: Settings) -> LedgerServer:
    url, server = served_app.uvicorn_server(create_app(settings, max_connections=8))
    loop = asyncio.new_event_loop()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve())
        finally:
            loop.close()

    thread = threading.Thread(target=serve, name="wl-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the work-ledger test server did not start")
        time.sleep(0.01)
    return LedgerServer(url, settings, server, thread, loop)


@pytest.fixture
def ledger_server(database_url: str, tmp_path: Path) -> Iterator[LedgerServer]:
    """A real server of this test's own, on its own database."""
    running = start(settings_for(database_url, tmp_path / "home"))
    yield running
    running.stop()
