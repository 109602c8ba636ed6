"""Failover between replicas: two real servers on one database, a client listing both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from support.ports import free_port
from support.wl_server import LedgerServer, settings_for, start
from work_ledger.cli import app
from work_ledger.client import AsyncClient, Client


@pytest.fixture
def replica_b(ledger_server: LedgerServer, tmp_path: Path) -> Iterator[LedgerServer]:
    """A second server on the same database and secret as `ledger_server`."""
    running = start(settings_for(ledger_server.settings.database_url or "", tmp_path / "b"))
    yield running
    running.stop()


class _DiesAfterWriting(httpx.BaseTransport):
    """The first POST to `victim` reaches it and commits, then the connection dies."""

    def __init__(self, victim: str) -> None:
        self.victim, self.killed = victim, 0
        self.inner = httpx.HTTPTransport()
        self.seen: list[tuple[str, int, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        self.seen.append((base, response.status_code, response.headers.get("idempotent-replayed")))
        if base == self.victim and request.method == "POST" and not self.killed:
            self.killed += 1
            raise httpx.ReadError("connection reset after the server committed")
        return response

    def close(self) -> None:
        self.inner.close()


def test_client_skips_a_dead_url(ledger_server: LedgerServer) -> None:
    """The first URL refuses connections: the call lands on the second, which stays in use."""
    dead = f"http://127.0.0.1:{free_port()}"
    token = ledger_server.token("operator", "op")
    with Client(f"{dead},{ledger_server.url}", token, retries=0) as client:
        assert client.healthz()["status"] == "ok"
        assert ledger_server.url == client.url
        assert client.register([{"external_ref": "fo/1", "fleet": "f"}]).created == 1


def test_claim_retried_on_the_other_replica_claims_once(
    ledger_server: LedgerServer, replica_b: LedgerServer
) -> None:
    """A claim whose answer was lost on A is retried on B with its key: one claim, replayed."""
    token = ledger_server.token("agent", "agent-1")
    with Client(ledger_server.url, ledger_server.token("operator", "op")) as operator:
        operator.register([{"external_ref": f"fo/{i}", "fleet": "f"} for i in range(3)])
    transport = _DiesAfterWriting(ledger_server.url)
    with Client(f"{ledger_server.url},{replica_b.url}", token, transport=transport) as agent:
        claim = agent.claim_next(key="claim-over-two-replicas")
        events = agent.list_events(claim.unit.id if claim.unit else None).items
    expected = [(ledger_server.url, 200, None), (replica_b.url, 200, "true")]
    assert expected == transport.seen[:2]
    assert [e.event_type for e in events] == ["claimed", "registered"]
    with Client(replica_b.url, token) as again:
        resumed = again.claim_next()
    assert resumed.resumed
    assert (claim.unit.id, claim.attempt.id) == (resumed.unit.id, resumed.attempt.id)  # type: ignore[union-attr]


async def test_async_client_fails_over(ledger_server: LedgerServer) -> None:
    """The async client moves past a dead URL the same way."""
    dead = f"http://127.0.0.1:{free_port()}"
    token = ledger_server.token("reader", "r")
    async with AsyncClient(f"{dead},{ledger_server.url}", token, retries=0) as client:
        assert (await client.healthz())["status"] == "ok"
        assert ledger_server.url == client.url


def test_cli_names_every_url_it_could_not_reach() -> None:
    """WL_URL with two dead URLs: exit 6 naming both (it used to crash on the comma)."""
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    result = CliRunner().invoke(
        app, ["show", "u/1"], env={"WL_URL": ",".join(urls), "WL_TOKEN": "wl_00000000_x"}
    )
    assert result.exit_code == 6, result.output
    assert f"{urls[0]}, {urls[1]}" in " ".join(result.output.split())


def test_cli_refuses_a_malformed_url_list() -> None:
    """A malformed item is a clear refusal (exit 1) naming it, not an httpx traceback."""
    result = CliRunner().invoke(
        app, ["show", "u/1"], env={"WL_URL": "http://a:1,ledger-b:4001", "WL_TOKEN": "wl_unused"}
    )
    assert result.exit_code == 1, result.output
    assert "client_misconfigured" in result.output
    assert "ledger-b:4001" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
