"""Fixtures: a real server per test (its own database), and SDK clients with minted tokens."""

# ruff: noqa: F811  (a test taking the shared `ledger_server` fixture names it as a parameter)

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from support.wl_server import LedgerServer, ledger_server  # noqa: F401  (the shared fixture)
from work_ledger.client import Client


@pytest.fixture
def make_client(ledger_server: LedgerServer) -> Iterator[Callable[..., Client]]:
    """Clients with a token of the given role and principal."""
    made: list[Client] = []

    def make(role: str = "agent", principal: str = "agent-1", **options: object) -> Client:
        client = Client(ledger_server.url, ledger_server.token(role, principal), **options)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def operator(make_client: Callable[..., Client]) -> Client:
    return make_client("operator", "op")


@pytest.fixture
def agent(make_client: Callable[..., Client]) -> Client:
    return make_client("agent", "agent-1")
