"""A `serve` child is ready only when /readyz is answered by that child: another test run's
server on the same port (runs share the port blocks) is told apart, not talked to."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support.ports import free_port
from support.served import PortTaken, Served, ledger_env, listens_on


class _AlwaysReady(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[ThreadingHTTPServer]:
    """Another run's server: answers /readyz 200 on a port of our block."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _AlwaysReady)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_a_first_start_on_a_taken_port_moves_to_another(
    database_url: str, tmp_path: Path, foreign: ThreadingHTTPServer
) -> None:
    taken = foreign.server_address[1]
    served = Served(ledger_env(database_url, tmp_path), tmp_path, port=taken)
    try:
        await served.start()
        assert served.port != taken
        assert served.proc is not None
        assert listens_on(served.proc.pid, served.port)
    finally:
        served.stop()


async def test_a_restart_on_a_port_taken_meanwhile_fails_saying_so(
    database_url: str, tmp_path: Path
) -> None:
    served = Served(ledger_env(database_url, tmp_path), tmp_path)
    await served.start()
    served.stop()
    server = ThreadingHTTPServer(("127.0.0.1", served.port), _AlwaysReady)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(PortTaken, match=f"port {served.port} was answered by another"):
            await served.start()
    finally:
        served.stop()
        server.shutdown()
        server.server_close()
