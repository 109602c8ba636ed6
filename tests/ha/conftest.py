"""The HA suite: Patroni failover (opt-in, slow) and point-in-time recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.ports import free_ha_port
from support.served import Served, StartServer, ledger_env


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    """Start `work-ledger serve` subprocesses on a given database URL ("": the embedded
    default, in WL_HOME `home`, by default a new folder); stopped afterwards."""
    started: list[Served] = []

    async def start(url: str, home: Path | None = None, **env: str) -> Served:
        home = home or tmp_path / f"home-{len(started)}"
        home.mkdir(exist_ok=True)
        server = Served(ledger_env(url, home, **env), home, port=free_ha_port())
        started.append(server)
        await server.start()
        return server

    yield start
    for server in started:
        server.stop()
