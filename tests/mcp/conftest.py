"""Fixtures: a real server per test, reused from the SDK tests' support module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from wl_server import LedgerServer, settings_for, start

from work_ledger.client import Client


@pytest.fixture
def ledger_server(database_url: str, tmp_path: Path) -> Iterator[LedgerServer]:
    running = start(settings_for(database_url, tmp_path / "home"))
    yield running
    running.stop()


@pytest.fixture
def operator(ledger_server: LedgerServer) -> Iterator[Client]:
    with Client(ledger_server.url, ledger_server.token("operator", "op")) as client:
        yield client
