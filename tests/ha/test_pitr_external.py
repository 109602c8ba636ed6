"""Point-in-time recovery of an external server, by the procedure docs/high-availability.md
gives: `archive_library = 'basic_archive'`, `work-ledger backup --base` over
WL_DATABASE_URL, and a recovery laid out by hand (restore_command, recovery_target_time)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from support.embedded_load import load, until, up_to
from support.history import check
from support.pgcluster import Node, build_server, recovering, remove
from support.served import StartServer, audit, cli
from work_ledger.db.connect import connect, ensure_database
from work_ledger.runtime import migrate_database

DATABASE = "ledger"


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    """Outside pytest's folders: the servers' user must enter it (made so by pgcluster)."""
    base = Path(tempfile.mkdtemp(prefix="wl-pitr-external-"))
    yield base
    await asyncio.to_thread(remove, base)


async def _promoted(url: str) -> None:
    for _ in range(600):
        with_conn: asyncpg.Connection = await connect(url)
        try:
            if not await with_conn.fetchval("SELECT pg_is_in_recovery()"):
                return
        finally:
            await with_conn.close()
        await asyncio.sleep(0.2)
    raise AssertionError("the restored server never left recovery")


async def test_an_archived_external_server_recovers_to_a_moment(
    start_server: StartServer, folder: Path
) -> None:
    """basic_archive's folder and a base backup bring the server back to T: every write
    acknowledged before T, none sent after it, `audit` clean."""
    archive = folder / "archive"
    archive.mkdir()
    primary = await asyncio.to_thread(
        build_server,
        folder,
        "primary",
        archive_mode="on",
        archive_library="basic_archive",
        **{"basic_archive.archive_directory": str(archive)},
    )
    owner = (folder / "primary").stat()  # the archiver writes as the server's user
    os.chown(archive, owner.st_uid, owner.st_gid)
    restored: Node | None = None
    try:
        await ensure_database(primary.url(), DATABASE)
        await migrate_database(primary.url(DATABASE))
        server = await start_server(primary.url(DATABASE))
        code, out = await cli(server.env, "backup", "--base", str(folder / "base"))
        assert code == 0, out
        async with load(server, primary.url(DATABASE)) as workload:
            await until(lambda: sum(op.acked for op in workload.recorder.ops) >= 150)
            moment, wall = time.monotonic(), dt.datetime.now(dt.UTC)
            await until(
                lambda: sum(op.acked for op in workload.recorder.ops if op.started > moment) >= 150
            )
        conn = await connect(primary.url())
        try:  # the segment holding T goes to the archive now, not at its end
            await conn.execute("SELECT pg_switch_wal()")
            await asyncio.sleep(2)
        finally:
            await conn.close()
        server.stop()
        await asyncio.to_thread(primary.stop)

        restored = await asyncio.to_thread(
            recovering,
            folder / "base",
            folder / "restored",
            archive_mode="off",
            restore_command=f"cp {archive}/%f %p",
            recovery_target_time=wall.isoformat(),
            recovery_target_action="promote",
        )
        await asyncio.to_thread(restored.start)
        await _promoted(restored.url())
        conn = await connect(restored.url(DATABASE))
        try:
            report = await check(conn, up_to(workload.recorder, moment))
        finally:
            await conn.close()
        print(f"\nexternal server restored to T:\n{report.summary()}")
        assert report.violations == []
        assert report.acked > 0
        code, out = await audit({**server.env, "WL_DATABASE_URL": restored.url(DATABASE)})
        assert code == 0, out
    finally:
        await asyncio.to_thread(primary.stop)
        if restored is not None:
            await asyncio.to_thread(restored.stop)
