"""The embedded PostgreSQL under WL_HOME: started on demand, shared, stopped by the last user."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from work_ledger.db.migrate import load_migrations

WORK_LEDGER = str(Path(sys.executable).parent / "work-ledger")
# A second process that holds the embedded server open until its stdin closes.
HOLDER = (
    "import os, pathlib, sys\n"
    "from work_ledger.db.embedded import embedded_server_url\n"
    "embedded_server_url(pathlib.Path(os.environ['WL_HOME']))\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def _postmasters(pgdata: Path) -> list[int]:
    """Pids of postgres server processes started on this data directory."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and Path(cmdline[0]).name == "postgres" and str(pgdata) in cmdline:
            found.append(proc.pid)
    return found


def _wait_for_no_postmaster(pgdata: Path, seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _postmasters(pgdata)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _migrate(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORK_LEDGER, "migrate"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_embedded_server_is_shared_and_stopped_by_the_last_process(tmp_path: Path) -> None:
    """migrate starts the server; a second process attaches to it; none outlives its users."""
    home = tmp_path / "wl-home"
    pgdata = home / "pgdata"
    env = {k: v for k, v in os.environ.items() if not k.endswith("DATABASE_URL")}
    env["WL_HOME"] = str(home)

    first = _migrate(env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"applied {len(load_migrations())} migration(s)" in first.stdout
    assert _wait_for_no_postmaster(pgdata) == []

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        running = _postmasters(pgdata)
        assert len(running) == 1

        second = _migrate(env, tmp_path)

        assert second.returncode == 0, second.stderr
        assert "applied 0 migration(s)" in second.stdout
        assert _postmasters(pgdata) == running  # attached: neither a new server nor a stop
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
        assert holder.stdout is not None
        holder.stdout.close()
    assert holder.returncode == 0
    assert _wait_for_no_postmaster(pgdata) == []
