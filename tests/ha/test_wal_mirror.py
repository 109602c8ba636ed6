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
from support.served import StartServer, audit, cli, client, mint
from work_ledger.db.connect import connect
from work_ledger.embedded import walmirror
from work_ledger.service.tokens import Role


def _kill_server(pgdata_pid: int) -> None:
    """SIGKILL the postmaster and its children: the disk under them is gone. It may have
    shut down by itself already: once a minute the postmaster checks that its lock file
    (postmaster.pid) is still there, and shuts down when it is not."""
    try:
        main = psutil.Process(pgdata_pid)
        processes = [main, *main.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in processes:
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
    async with load(server, embedded_url(server.home)) as workload:
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


def _receiver(home: Path) -> psutil.Process:
    """The pg_receivewal that streams to the mirror now (a child of the loop)."""
    loop = psutil.Process(int((home / walmirror.PID_FILE).read_text()))
    for _ in range(200):
        found = [p for p in loop.children() if p.name() == "pg_receivewal"]
        if found and "--synchronous" in found[0].cmdline():
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no pg_receivewal streams to the mirror")


async def test_no_commit_is_acknowledged_while_the_mirror_is_away(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The receiver frozen: a write answers 503 (in doubt) rather than 2xx; thawed, its
    same-key retry acts once. The receiver killed: its loop brings it back, writes resume."""
    server = await start_server(
        "", WL_WAL_MIRROR=str(tmp_path / "mirror"), WL_STATEMENT_TIMEOUT="2"
    )
    [token] = await mint(embedded_url(server.home), [(Role.OPERATOR, "op")])
    body = {"units": [{"external_ref": "while-away", "fleet": "f"}]}
    headers = {"Idempotency-Key": "while-away"}
    async with client(server.url, token, timeout=30) as http:
        receiver = _receiver(server.home)
        receiver.send_signal(signal.SIGSTOP)
        try:
            away = await http.post("/units", json=body, headers=headers)
        finally:
            receiver.send_signal(signal.SIGCONT)
        assert away.status_code == 503, away.text
        again = await http.post("/units", json=body, headers=headers)
        assert again.status_code == 200, again.text

        _receiver(server.home).send_signal(signal.SIGKILL)
        after = await http.post("/units", json={"units": [{"external_ref": "after", "fleet": "f"}]})
        assert after.status_code == 200, after.text
    conn = await connect(embedded_url(server.home))
    try:
        refs = await conn.fetch("SELECT external_ref FROM work_units ORDER BY external_ref")
    finally:
        await conn.close()
    assert [r["external_ref"] for r in refs] == ["after", "while-away"]
