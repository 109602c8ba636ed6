"""WL_WAL_MIRROR: the embedded server's WAL, streamed to a second folder before each commit
is acknowledged (docs/high-availability.md).

`pg_receivewal --synchronous` (the wheel's) receives the WAL through a replication slot
and flushes it to the mirror folder, another disk, as it arrives; the server names it in
`synchronous_standby_names`, so a commit is acknowledged only once the mirror holds it.
The data folder's disk may then die whole: a base backup (`work-ledger backup --base`) and
the mirror bring back every acknowledged write (`work-ledger restore --wal`).

The receiver outlives the process that started it (any holder of the server may exit
first): it runs in a session of its own, restarted by a shell loop if it ever exits, its
process group recorded in WL_HOME. The last holder stops it once the server has stopped.
While it is down no commit is acknowledged: the ledger answers 503 rather than keep a
write on one disk only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from pathlib import Path

import psutil

from work_ledger.embedded.programs import program

APPLICATION_NAME = "wl_wal_mirror"
SLOT = "wl_wal_mirror"
PID_FILE = "walmirror.pid"
LOG_FILE = "walmirror.log"
# The server setting that makes a commit wait for the mirror's flush.
SERVER_OPTIONS = f"-c synchronous_standby_names={APPLICATION_NAME}"


def _conninfo(socket_dir: Path, passfile: Path, superuser: str) -> str:
    return (
        f"host={socket_dir} user={superuser} passfile={passfile} "
        f"application_name={APPLICATION_NAME}"
    )


def _script(mirror: Path, conninfo: str) -> str:
    """Create the slot once, then receive for ever (pg_receivewal reconnects by itself;
    the loop brings it back should it exit)."""
    receivewal = shlex.quote(str(program("pg_receivewal")))
    common = f"-d {shlex.quote(conninfo)} --slot={SLOT}"
    return (
        f"{receivewal} {common} --create-slot --if-not-exists; "
        f"while :; do {receivewal} {common} -D {shlex.quote(str(mirror))} --synchronous "
        "--no-password; sleep 1; done"
    )


def running(home: Path) -> bool:
    """Is the receiver loop recorded under `home` alive?"""
    try:
        pgid = int((home / PID_FILE).read_text().split()[0])
        return psutil.Process(pgid).is_running() and os.getpgid(pgid) == pgid
    except (FileNotFoundError, ValueError, IndexError, psutil.Error, ProcessLookupError):
        return False


def start(home: Path, mirror: Path, socket_dir: Path, superuser: str) -> None:
    """Start the receiver loop unless it runs; the mirror folder is made private."""
    if running(home):
        return
    mirror.mkdir(mode=0o700, parents=True, exist_ok=True)
    conninfo = _conninfo(socket_dir, home / "pgpass", superuser)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WL_", "PG"))}
    with open(home / LOG_FILE, "ab") as log:
        loop = subprocess.Popen(
            ["/bin/sh", "-c", _script(mirror, conninfo)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped as one, never orphaned
            cwd=home,
        )
    (home / PID_FILE).write_text(f"{loop.pid}\n")


def stop(home: Path) -> None:
    """Stop the receiver loop and its pg_receivewal (after the server stopped: by then the
    server has streamed it everything, its shutdown checkpoint included)."""
    if running(home):
        pgid = int((home / PID_FILE).read_text().split()[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(psutil.Error):
            psutil.Process(pgid).wait(10)
    (home / PID_FILE).unlink(missing_ok=True)
