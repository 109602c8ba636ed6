"""WL_WAL_MIRROR: the data folder deleted under load, the ledger recovered from a base
backup and the mirror, nothing acknowledged lost."""

from __future__ import annotations

import contextlib
import shutil
import signal
import time
from pathlib import Path

import psutil

from support.embedded_load import embedded_env, embedded_url, load, until
from support.history import check
from support.served import StartServer, audit, cli
from work_ledger.db.connect import connect
from work_ledger.embedded import walmirror


def _kill_server(pgdata_pid: int) -> None:
    """SIGKILL the postmaster and its children: the disk under them is gone."""
    main = psutil.Process(pgdata_pid)
    for process in [main, *main.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)


async def test_the_data_folder_lost_under_load_loses_nothing_acknowledged(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Delete pgdata while agents write, kill what is left, restore the base backup and
    replay the mirror: every acknowledged write is there, and `audit` is clean."""
    mirror, base = tmp_path / "mirror", tmp_path / "base"
    server = await start_server("", WL_WAL_MIRROR=str(mirror))
    code, out = await cli(server.env, "backup", "--base", str(base))
    assert code == 0, out
    pgdata = server.home / "pgdata"
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    async with load(server, server.home) as workload:
        await until(lambda: sum(op.acked for op in workload.recorder.ops) >= 150)
        shutil.rmtree(pgdata)  # the disk's death, as the server sees it: its files gone
        deleted = time.monotonic()
        await until(lambda: any(op.ended > deleted + 1 for op in workload.recorder.ops))
        _kill_server(postmaster)
        server.kill()
    walmirror.stop(server.home)

    restored = tmp_path / "restored"
    code, out = await cli(embedded_env(restored), "restore", str(base), "--wal", str(mirror))
    assert code == 0, out
    print(f"\n{out.strip()}")
    again = await start_server("", home=restored)
    conn = await connect(embedded_url(restored))
    try:
        report = await check(conn, workload.recorder)
    finally:
        await conn.close()
    after = sum(
        op.acked and op.method == "POST" for op in workload.recorder.ops if op.started > deleted
    )
    print(f"\nrecovered after the data folder's loss ({after} writes acknowledged after it):")
    print(report.summary())
    assert report.violations == []
    assert report.acked > 0
    code, out = await audit(again.env)
    assert code == 0, out
