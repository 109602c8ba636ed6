"""`work-ledger backup DEST` and `restore SRC`: the whole ledger database, with pg_dump.

A backup is `pg_dump`'s custom format (compressed; tables, data, indexes, triggers and
the migration record), taken from one consistent snapshot while `serve` keeps serving:
pg_dump holds only the locks a reader holds. It is written under a temporary name and
renamed when complete, so DEST never names half a backup. Restore loads it in one
transaction into a database that holds no ledger yet (a new WL_HOME, or an empty
database), then applies any migration newer than the backup.
"""

from __future__ import annotations

import os
from pathlib import Path

from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES
from work_ledger.embedded.programs import run
from work_ledger.errors import InvalidInput, InvariantViolation


def backup(url: str, dest: Path) -> int:
    """Dump the ledger at `url` into the new file `dest`; returns its size in bytes."""
    if dest.exists():
        raise InvalidInput(f"{dest} already exists; a backup never overwrites: name a new DEST")
    partial = dest.with_name(dest.name + ".partial")
    try:
        run(
            "pg_dump", ["--format=custom", "--no-owner", "--no-privileges", "-f", str(partial)], url
        )
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest.stat().st_size


async def refuse_live_ledger(url: str) -> None:
    """Restore goes only into a database without a ledger: never over one in use."""
    conn = await connect(url)
    try:
        exists = await conn.fetchval(QUERIES["ledger_exists"])
    finally:
        await conn.close()
    if exists:
        raise InvariantViolation(
            "the target database already holds a ledger; restore never overwrites one. "
            "Restore into a new WL_HOME (embedded) or an empty database (WL_DATABASE_URL)",
            invariant="restore_into_empty_database",
        )


def restore(src: Path, url: str) -> None:
    """Load the backup `src` into the (ledger-free) database at `url`, all or nothing."""
    if not src.is_file():
        raise InvalidInput(f"{src} is not a backup file made by `work-ledger backup`")
    args = ["--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction", str(src)]
    run("pg_restore", args, url)
