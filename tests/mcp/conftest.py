"""Fixtures: a real server per test, reused from the SDK tests' support module."""

# ruff: noqa: F811  (a test taking the shared `ledger_server` fixture names it as a parameter)

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from support.wl_server import LedgerServer, ledger_server  # noqa: F401  (the shared fixture)
from work_ledger.client import Client


@pytest.fixture
def operator(ledger_server: LedgerServer) -> Iterator[Client]:
    with Client(ledger_server.url, ledger_server.token("operator", "op")) as client:
        yield client
