"""Debian's PgBouncer, started by a test in front of a test's PostgreSQL.

`pool_mode = transaction` (the mode most deployments run), with `default_pool_size` server
connections per database and user: fewer than the clients, so every transaction may run on
another server connection. It runs as the PostgreSQL servers' OS user (PgBouncer refuses
root), with its configuration, log and users file in a folder of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from support.pgcluster import server_os_user
from support.ports import free_port


def pgbouncer_program() -> str | None:
    """The pgbouncer program, if installed (Debian puts it in /usr/sbin)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


@dataclass
class Bouncer:
    port: int
    folder: Path
    proc: subprocess.Popen[bytes]

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # PgBouncer's "shut down now"
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def start_bouncer(folder: Path, server_port: int, *, pool_size: int) -> Bouncer:
    """PgBouncer on a free 127.0.0.1 port, in front of every database of the (trust)
    PostgreSQL on `server_port`."""
    program = pgbouncer_program()
    assert program is not None
    user = server_os_user()
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
        "max_client_conn = 500\nreserve_pool_size = 0\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    for path in (folder, folder / "users.txt", folder / "pgbouncer.ini"):
        user.own(path)
    proc = subprocess.Popen(
        [program, str(folder / "pgbouncer.ini")],
        cwd="/",
        env={k: v for k, v in os.environ.items() if not k.startswith(("WL_", "PG"))},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        user=user.uid if user.switch else None,
        group=user.gid if user.switch else None,
        extra_groups=[] if user.switch else None,
    )
    bouncer = Bouncer(port, folder, proc)
    deadline = time.monotonic() + 30
    while "listening on 127.0.0.1" not in _read(folder / "pgbouncer.log"):
        assert proc.poll() is None, _read(folder / "pgbouncer.log")
        assert time.monotonic() < deadline, "pgbouncer did not start listening within 30 s"
        time.sleep(0.05)
    return bouncer


def _read(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(errors="replace")
    return ""
