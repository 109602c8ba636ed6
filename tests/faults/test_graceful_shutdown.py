"""SIGTERM to `work-ledger serve`: what Kubernetes and systemd send to stop a replica.

The server stops accepting, answers the requests it holds (a long-poll at once, with
`unit: null`), closes its pool, stops the embedded PostgreSQL and exits 0.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psutil
import pytest

from support.embedded_load import embedded_env
from support.served import Served, cli_token, client
from work_ledger.api.schemas import MAX_WAIT_SECONDS
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults


def _held_connections(pid: int, port: int) -> int:
    """Client connections that process `pid` has accepted on `port`."""
    return sum(
        1
        for conn in psutil.Process(pid).net_connections(kind="tcp")
        if conn.status == psutil.CONN_ESTABLISHED and conn.laddr and conn.laddr.port == port
    )


async def _until(condition: object, within: float) -> None:
    assert callable(condition)
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def test_sigterm_answers_what_it_holds_stops_postgres_and_exits_0() -> None:
    """A long-poll and a half-sent registration in flight at SIGTERM: the long-poll answers
    `unit: null` at once, a new connection is refused, the registration (its body finished
    after the signal) is answered; then the embedded PostgreSQL stops and serve exits 0."""
    # Not under pytest's folders, which PostgreSQL's own user may not enter (as in conftest).
    home = Path(tempfile.mkdtemp(prefix="wl-sigterm-"))
    atexit.register(shutil.rmtree, home, True)
    server = Served(embedded_env(home), home)
    try:
        await server.start()
        assert server.proc is not None
        operator = (home / "operator.token").read_text().strip()
        agent = await cli_token(server.env, Role.AGENT, "agent-1")
        assert (home / "pgdata" / "postmaster.pid").exists()

        rest_of_body = asyncio.Event()

        async def body() -> AsyncIterator[bytes]:
            yield b'{"units":[{"external_ref":"late/one","fleet":"f",'
            await rest_of_body.wait()
            yield b'"domain":"orders"}]}'

        async with (
            client(server.url, agent, timeout=120) as agents,
            client(server.url, operator, timeout=120) as operators,
        ):
            poll = asyncio.create_task(
                agents.post(
                    "/units/claim",
                    json={"wait_seconds": MAX_WAIT_SECONDS},
                    headers={"Idempotency-Key": "poll-1"},
                )
            )
            register = asyncio.create_task(
                operators.post(
                    "/units", content=body(), headers={"Content-Type": "application/json"}
                )
            )
            pid = server.proc.pid
            await _until(lambda: _held_connections(pid, server.port) >= 2, within=30)
            await asyncio.sleep(0.5)  # both requests read by the server, not just accepted
            assert not poll.done()
            assert not register.done()

            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            answered = await asyncio.wait_for(poll, MAX_WAIT_SECONDS / 2)
            waited = time.monotonic() - signalled

            assert answered.status_code == 200, answered.text
            assert answered.json()["unit"] is None
            assert waited < MAX_WAIT_SECONDS / 4  # at once, not after its wait_seconds
            assert not register.done()
            with pytest.raises(httpx.ConnectError):  # no longer accepting
                async with httpx.AsyncClient(base_url=server.url, timeout=5) as fresh:
                    await fresh.get("/healthz")
            assert server.proc.poll() is None  # still finishing the registration

            rest_of_body.set()
            registered = await asyncio.wait_for(register, 60)

        assert registered.status_code == 200, registered.text
        assert registered.json()["created"] == 1
        assert server.proc.wait(timeout=60) == 0, server.log_tail()
        assert not (home / "pgdata" / "postmaster.pid").exists(), "PostgreSQL still runs"

        # The registration answered during the drain was committed: a restart serves it.
        await server.start()
        async with client(server.url, operator) as operators:
            found = await operators.get("/units/late/one")
        assert found.status_code == 200, found.text
    finally:
        server.stop()
