"""Safekeeping verbs: backup, restore and export (they open the database directly)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import typer

from work_ledger.cli.typer_app import app, console, run_async
from work_ledger.config import load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.readside.pool import connect_reader
from work_ledger.runtime import migrate_database
from work_ledger.safekeeping.backup import backup as dump
from work_ledger.safekeeping.backup import refuse_live_ledger
from work_ledger.safekeeping.backup import restore as load
from work_ledger.safekeeping.export import FileEntry
from work_ledger.safekeeping.export import export as write_export

Dest = Annotated[Path, typer.Argument(help="A new file or folder; never overwritten.")]


@app.command()
def backup(dest: Dest) -> None:
    """Write a consistent backup of the ledger database to DEST (pg_dump custom format),
    while `serve` keeps serving."""

    async def _backup() -> tuple[int, float]:
        url = await resolve_database_url(load_settings())
        started = time.monotonic()
        size = await asyncio.to_thread(dump, url, dest)
        return size, time.monotonic() - started

    size, seconds = run_async(_backup())
    console.print(f"backup written to {dest}: {size:,} bytes in {seconds:.1f}s")


@app.command()
def restore(
    src: Annotated[Path, typer.Argument(help="A file written by `work-ledger backup`.")],
) -> None:
    """Restore a backup into this WL_HOME's (new) embedded ledger or WL_DATABASE_URL's
    (empty) database; refuses a database that already holds a ledger."""

    async def _restore() -> float:
        url = await resolve_database_url(load_settings())
        await refuse_live_ledger(url)
        started = time.monotonic()
        await asyncio.to_thread(load, src, url)
        await migrate_database(url)
        return time.monotonic() - started

    seconds = run_async(_restore())
    console.print(
        f"restored {src} in {seconds:.1f}s; run `work-ledger audit` to check it. API tokens "
        "verify only with the secret they were minted under (WL_SECRET or WL_HOME/secret)"
    )


@app.command()
def export(dest: Dest) -> None:
    """Export units, attempts, events and questions to the folder DEST as JSON Lines, with
    a manifest of counts and SHA-256 checksums (docs/export.md). Reads from
    WL_READ_DATABASE_URL when set."""

    async def _export() -> dict[str, FileEntry]:
        conn = await connect_reader(load_settings())
        try:
            return await write_export(conn, dest)
        finally:
            await conn.close()

    files = run_async(_export())
    for name, entry in files.items():
        console.print(f"{name}: {entry.rows:,} rows, {entry.bytes:,} bytes")
    console.print(f"manifest: {dest / 'manifest.json'}")
