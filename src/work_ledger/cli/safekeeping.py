"""Safekeeping verbs: backup, restore and export (they open the database directly)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Annotated

import typer

from work_ledger.cli.typer_app import app, console, run_async
from work_ledger.config import load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.errors import InvalidInput
from work_ledger.readside.pool import connect_reader
from work_ledger.runtime import migrate_database
from work_ledger.safekeeping.backup import backup as dump
from work_ledger.safekeeping.backup import refuse_live_ledger
from work_ledger.safekeeping.backup import restore as load
from work_ledger.safekeeping.export import FileEntry
from work_ledger.safekeeping.export import export as write_export
from work_ledger.safekeeping.pitr import base_backup, recover

Dest = Annotated[Path, typer.Argument(help="A new file or folder; never overwritten.")]


@app.command()
def backup(
    dest: Dest,
    base: Annotated[
        bool,
        typer.Option(
            "--base",
            help="A base backup of the whole server (pg_basebackup) into the folder DEST, "
            "for `restore --wal` (point-in-time recovery) instead of a dump.",
        ),
    ] = False,
) -> None:
    """Write a consistent backup of the ledger database to DEST (pg_dump custom format),
    while `serve` keeps serving."""

    async def _backup() -> tuple[int, float]:
        settings = load_settings()
        url = await resolve_database_url(settings)
        started = time.monotonic()
        if base:
            home = None if settings.database_url else settings.home
            size = await asyncio.to_thread(base_backup, url, dest, home)
        else:
            size = await asyncio.to_thread(dump, url, dest)
        return size, time.monotonic() - started

    size, seconds = run_async(_backup())
    console.print(f"backup written to {dest}: {size:,} bytes in {seconds:.1f}s")


def _moment(value: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidInput(
            f"--to {value!r} is not an ISO 8601 time with its offset: give one such as "
            "2026-12-01T20:15:00+00:00"
        )
    return moment


def _recover(src: Path, wal: Path | None, to: str | None) -> None:
    """Point-in-time recovery into this WL_HOME's new embedded ledger."""
    settings = load_settings()

    async def _run() -> tuple[int, float, dt.datetime | None]:
        if settings.database_url:
            raise InvalidInput(
                "restore --wal/--to recovers into the embedded default (a new WL_HOME); for "
                "an external server follow docs/high-availability.md (restore_command, "
                "recovery_target_time): unset WL_DATABASE_URL, or restore a dump"
            )
        if wal is None and to is not None:
            raise InvalidInput("--to needs --wal: the WAL folder to replay up to that moment")
        target = None if to is None else _moment(to)
        started = time.monotonic()
        laid = await recover(src, settings.home, wal, target)
        url = await resolve_database_url(settings)
        await migrate_database(url)
        return laid, time.monotonic() - started, target

    laid, seconds, target = run_async(_run())
    until = "the end of the WAL" if target is None else target.isoformat()
    console.print(
        f"recovered {src} and {laid} WAL files up to {until} in {seconds:.1f}s; run "
        "`work-ledger audit` to check it"
    )


@app.command()
def restore(
    src: Annotated[
        Path,
        typer.Argument(help="A file written by `work-ledger backup`, or a `--base` folder."),
    ],
    wal: Annotated[
        Path | None,
        typer.Option(
            help="A folder of WAL segments (WL_WAL_MIRROR's) to replay over the base "
            "backup SRC; without --to, up to the last one."
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            help="Recover to this moment (ISO 8601 with offset): every transaction committed "
            "at or before it, none after. Needs --wal and a base backup made before it."
        ),
    ] = None,
) -> None:
    """Restore a backup into this WL_HOME's (new) embedded ledger or WL_DATABASE_URL's
    (empty) database; refuses a database that already holds a ledger. With a base backup
    and --wal (and --to), recover to the end of the WAL (or to a moment)."""
    if wal is not None or to is not None or src.is_dir():
        _recover(src, wal, to)
        return

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
