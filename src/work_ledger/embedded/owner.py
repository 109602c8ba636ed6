"""Who runs the embedded PostgreSQL, and what it may reach.

PostgreSQL refuses to run as root. Run by root, the ledger runs it as a system user of its
own (`wl-postgres`, or the owner of a data directory made earlier) and gives that user
exactly what it needs: ownership of the data and socket folders, and search (`x`)
permission on the folders above them and above the server's binaries, granted by a POSIX
ACL entry naming that user alone. No folder's mode is changed: a private folder stays
closed to everyone else. (`ls -l` then shows `drwx--x---+`: with an ACL, the group column
shows the ACL mask; the group's own entry keeps the permissions it had.)

Run by anyone else, PostgreSQL runs as that user and none of this applies.

The server module asks only for a user (`database_user`, `server_user`: already able to
reach the wheel's binaries), and then has it `own` and `run` things; every grant is made
here.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from work_ledger.embedded.programs import program

SYSTEM_USER = "wl-postgres"

_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_SEARCH = 0o1


@dataclass(frozen=True, slots=True)
class DbUser:
    """The OS user PostgreSQL runs as; `switch` is False when that is this process's user."""

    uid: int
    gid: int
    switch: bool

    def run(
        self, argv: list[str], *, cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program as this user in `cwd` (a data directory), with no WL_*
        or PG* variable inherited.

        The search above `cwd` is granted again each time: a `chmod` of a folder above
        resets its ACL mask."""
        grant_search_above(cwd, self)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WL_", "PG"))}
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            user=self.uid if self.switch else None,
            group=self.gid if self.switch else None,
            extra_groups=[] if self.switch else None,
        )

    def own(self, path: Path) -> None:
        """Hand `path` (a folder or file the server writes) to this user, and let it pass
        through the folders above."""
        if self.switch:
            os.chown(path, self.uid, self.gid)
            grant_search_above(path, self)


def database_user(pgdata: Path) -> DbUser:
    """The user PostgreSQL runs as for `pgdata`, able to reach the wheel's binaries: this
    process's, or (as root) the owner of a data directory made earlier, else `wl-postgres`."""
    made = pgdata / "PG_VERSION"
    if os.geteuid() == 0 and made.exists() and made.stat().st_uid != 0:
        info = made.stat()  # a data directory made earlier keeps its owner
        return _reaching_binaries(DbUser(info.st_uid, info.st_gid, switch=True))
    return server_user()


def server_user() -> DbUser:
    """The user a new PostgreSQL server runs as, able to reach the wheel's binaries: this
    process's, or (as root) `wl-postgres`."""
    if os.geteuid() != 0:
        return DbUser(os.geteuid(), os.getegid(), switch=False)
    entry = _system_user(SYSTEM_USER)
    return _reaching_binaries(DbUser(entry.pw_uid, entry.pw_gid, switch=True))


def _reaching_binaries(user: DbUser) -> DbUser:
    # The wheel may sit in a checkout under a private folder (a `mktemp -d` clone).
    grant_search_above(program("postgres"), user)
    return user


def _system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    made = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(name)  # another process may have made it meanwhile
    except KeyError:
        raise RuntimeError(
            f"PostgreSQL cannot run as root and the system user {name!r} could not be "
            f"created ({made.stderr.strip()}); create it (`useradd --system {name}`) or run "
            "work-ledger as an ordinary user"
        ) from None


def grant_search_above(path: Path, user: DbUser) -> None:
    """Let `user` pass through every folder above `path`, widening nothing for anyone else."""
    if not user.switch:
        return
    for folder in path.resolve().parents:
        if not _can_search(folder, user.uid):
            _add_acl_search(folder, user.uid)


def _can_search(folder: Path, uid: int) -> bool:
    info = folder.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    entries = {(tag, id_): perm for tag, perm, id_ in _read_acl(folder, info.st_mode)}
    if (_USER, uid) in entries:  # a named entry counts as far as the mask lets it
        return bool(entries[(_USER, uid)] & entries.get((_MASK, _NO_ID), 7) & _SEARCH)
    return bool(info.st_mode & stat.S_IXOTH)


def _read_acl(folder: Path, mode: int) -> list[tuple[int, int, int]]:
    """(tag, perm, id) entries of the folder's access ACL (its mode when it has none)."""
    try:
        raw = os.getxattr(folder, _ACL_XATTR)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        return [
            (_USER_OBJ, (mode >> 6) & 7, _NO_ID),
            (_GROUP_OBJ, (mode >> 3) & 7, _NO_ID),
            (_OTHER, mode & 7, _NO_ID),
        ]
    return [(tag, perm, id_) for tag, perm, id_ in struct.iter_unpack("<HHI", raw[4:])]


def _add_acl_search(folder: Path, uid: int) -> None:
    entries = {(tag, id_): perm for tag, perm, id_ in _read_acl(folder, folder.stat().st_mode)}
    entries[(_USER, uid)] = entries.get((_USER, uid), 0) | _SEARCH
    # The mask caps every named entry; it gains search only, so the owning group's
    # effective permissions (its entry AND the mask) are what they were.
    group = entries[(_GROUP_OBJ, _NO_ID)]
    entries[(_MASK, _NO_ID)] = entries.get((_MASK, _NO_ID), group) | _SEARCH
    body = b"".join(
        struct.pack("<HHI", tag, perm, id_) for (tag, id_), perm in sorted(entries.items())
    )
    try:
        os.setxattr(folder, _ACL_XATTR, struct.pack("<I", _ACL_VERSION) + body)
    except OSError as exc:
        raise RuntimeError(
            f"the PostgreSQL user (uid {uid}) cannot pass through {folder}, and a POSIX ACL "
            f"could not grant it ({exc.strerror}); work-ledger will not widen the folder's "
            "mode. Set WL_HOME to a folder on a file system with ACLs (ext4, xfs, tmpfs), or "
            "run work-ledger as an ordinary user"
        ) from None
