"""`work-ledger serve` started under a low soft limit on open files (1,024 is common): it
lifts the limit towards the hard one, so that its connection cap, not EMFILE, bounds how
many agents it holds."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import psutil
import pytest

from support.served import Served, ledger_env
from work_ledger.api.connection import SPARE_FILES, Limits

pytestmark = pytest.mark.faults

LOW = 128  # fewer than the connections below
HELD = 200


async def test_serve_lifts_a_low_open_files_limit(database_url: str, tmp_path: Path) -> None:
    """Started with a soft limit of 128 descriptors, serve holds 200 connections at once and
    answers on each; its soft limit is raised to what its cap needs (within the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HELD + 100:
        pytest.skip(f"the hard limit on open files here ({hard}) is below the test's need")
    server = Served(ledger_env(database_url, tmp_path), tmp_path)
    # The child inherits the limits in force when it is spawned: lowered for that moment only.
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW, hard))
    try:
        server.spawn()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    held: list[asyncio.StreamWriter] = []
    try:
        await server.wait_ready_or_move(may_move=False)
        assert server.proc is not None
        served_soft, _ = psutil.Process(server.proc.pid).rlimit(psutil.RLIMIT_NOFILE)
        needed = Limits().max_connections + SPARE_FILES
        assert served_soft >= (needed if hard == resource.RLIM_INFINITY else min(needed, hard))
        # Every connection stays open (keep-alive) while the next ones are made and answered.
        for _ in range(HELD):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            held.append(writer)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
        assert server.proc.poll() is None
    finally:
        for writer in held:
            writer.close()
        server.stop()
