"""Fault tests: real `work-ledger serve` processes, real signals, a stoppable PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.served import Served, StartServer, ledger_env


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: fault injection and hostile input (real processes and signals)"
    )


@pytest.fixture
async def start_server(database_url: str, tmp_path: Path) -> AsyncIterator[StartServer]:
    """Start `work-ledger serve` subprocesses over this test's database; stopped afterwards."""
    started: list[Served] = []

    async def start(
        url: str | None = None, *, serve_args: tuple[str, ...] = (), **env: str
    ) -> Served:
        home = tmp_path / f"home-{len(started)}"
        home.mkdir()
        server = Served(ledger_env(url or database_url, home, **env), home, serve_args=serve_args)
        started.append(server)
        await server.start()
        return server

    yield start
    for server in started:
        server.stop()
