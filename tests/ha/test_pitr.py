"""Point-in-time recovery of the embedded default: a base backup, the WAL mirror, and a
restore to a moment T in the middle of a history-checked workload."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from support.embedded_load import embedded_env, embedded_url, load, until, up_to
from support.history import check
from support.served import StartServer, audit, cli
from work_ledger.db.connect import connect


async def test_restore_to_a_moment_keeps_what_was_acknowledged_before_it_and_nothing_after(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Every write acknowledged before T is in the restored ledger, none sent after T is,
    and `audit` is clean."""
    mirror, base = tmp_path / "mirror", tmp_path / "base"
    server = await start_server("", WL_WAL_MIRROR=str(mirror))
    code, out = await cli(server.env, "backup", "--base", str(base))
    assert code == 0, out
    async with load(server, embedded_url(server.home)) as workload:
        await until(lambda: sum(op.acked for op in workload.recorder.ops) >= 150)
        moment, wall = time.monotonic(), dt.datetime.now(dt.UTC)
        await until(
            lambda: sum(op.acked for op in workload.recorder.ops if op.started > moment) >= 150
        )
    server.stop()
    after = [
        op
        for op in workload.recorder.ops
        if op.acked and op.method == "POST" and op.started > moment
    ]
    assert after  # writes acknowledged after T: the restore must leave them out

    restored = tmp_path / "restored"
    code, out = await cli(
        embedded_env(restored), "restore", str(base), "--wal", str(mirror), "--to", wall.isoformat()
    )
    assert code == 0, out
    print(f"\n{out.strip()}")
    again = await start_server("", home=restored)
    conn = await connect(embedded_url(restored))
    try:
        report = await check(conn, up_to(workload.recorder, moment))
    finally:
        await conn.close()
    print(f"\nrestored to T (of {len(workload.recorder.ops)} requests):\n{report.summary()}")
    assert report.violations == []
    assert report.acked > 0
    code, out = await audit(again.env)
    assert code == 0, out
