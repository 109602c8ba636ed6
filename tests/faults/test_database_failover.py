"""A real primary and synchronous standby: reads from the standby, then a failover under load.

One pair of servers per module (built in seconds with the wheel's initdb and
pg_basebackup); the read-side test runs first, the failover kills the primary.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from support.failover import run_failover
from support.pgcluster import Pair, build_pair, remove
from support.ports import free_port
from support.served import StartServer, cli, client, mint
from work_ledger.db.connect import connect, ensure_database
from work_ledger.runtime import migrate_database
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
DATABASE = "ledger"
# Expected well under a second; the reservation the old design left took 30 s to lapse.
RETRY_BOUND_SECONDS = 10.0


@pytest.fixture(scope="module")
async def pair() -> AsyncIterator[Pair]:
    base = Path(tempfile.mkdtemp(prefix="wl-failover-"))
    built = await asyncio.to_thread(build_pair, base, synchronous=True)
    try:
        await ensure_database(built.primary.url(), DATABASE)
        await migrate_database(built.primary.url(DATABASE))
        yield built
    finally:
        await asyncio.to_thread(built.stop)
        remove(base)


async def _replayed(standby: str, units: int) -> None:
    """Wait until the standby has replayed the registration (it is flushed, maybe not
    applied, when the primary acknowledges)."""
    conn: asyncpg.Connection = await connect(standby)
    try:
        for _ in range(500):
            if await conn.fetchval("SELECT count(*) FROM work_units") >= units:
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the standby never replayed the registration")
    finally:
        await conn.close()


async def test_report_and_metrics_read_the_standby(pair: Pair, start_server: StartServer) -> None:
    """WL_READ_DATABASE_URL: /metrics and `report` read the standby's views; the report
    works with the primary unreachable, so it never touched it."""
    standby = pair.standby.url(DATABASE)
    server = await start_server(pair.multi_host_url(DATABASE), WL_READ_DATABASE_URL=standby)
    [operator] = await mint(pair.primary.url(DATABASE), [(Role.OPERATOR, "reads")])
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"read-{i}", "fleet": "f", "domain": "reads"} for i in range(7)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
        await _replayed(standby, 7)
        metrics = (await op.get("/metrics")).text
    assert 'work_ledger_units{domain="reads",state="ready"} 7.0' in metrics
    conn: asyncpg.Connection = await connect(standby)
    try:
        readers = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'work-ledger' "
            "AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    assert readers >= 1  # the server's read pool is on the standby

    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/{DATABASE}"
    env = server.env | {"WL_DATABASE_URL": nowhere, "WL_READ_DATABASE_URL": standby}
    code, out = await cli(env, "report", "--domain", "reads")
    assert code == 0, out
    assert "7" in out


async def test_failover_to_a_synchronous_standby_loses_nothing(
    pair: Pair, start_server: StartServer
) -> None:
    """SIGKILL of the primary under load, promotion: every 2xx on the promoted server once,
    no 500, audit clean, and the claim cut off by the kill retried under its key at once."""
    result = await run_failover(pair, DATABASE, start_server, load_seconds=2.0)
    print(f"\nsynchronous standby failover:\n{result.summary()}")
    assert result.report.violations == []
    assert result.audit_code == 0, result.audit_out
    assert 500 not in result.statuses
    assert result.cut_status == 200
    assert result.cut_retry_seconds < RETRY_BOUND_SECONDS
    assert result.acked_after > 0  # the agents went on against the promoted server
    assert result.report.in_doubt > 0 or result.statuses.get(503, 0) > 0  # the kill cut in
