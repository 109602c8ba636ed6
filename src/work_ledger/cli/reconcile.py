"""`work-ledger reconcile FILE`: the ledger against an export of workflow executions."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Annotated

import typer

from work_ledger.cli.app import app, console, err_console
from work_ledger.config import load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.errors import WorkLedgerError
from work_ledger.reconcile import Execution, LedgerUnit, compare, load_executions, read_units


@app.command()
def reconcile(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            help="JSON or CSV export of workflow executions (workflow_id, status, close_time).",
        ),
    ],
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Temporal's retention: closed units disposed longer ago than this are not "
            "reported when their execution is missing from the export.",
        ),
    ] = None,
) -> None:
    """Compare every unit that has a workflow_id with the export and print each mismatch.

    Exit 0: they agree; 1: mismatches (one per line: kind, unit, what differs); 2: the
    export or the database could not be read. Read-only: the ledger is never changed.
    """
    try:
        executions = load_executions(file)
        units = asyncio.run(_units())
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(2) from None
    purged_before = None
    if retention_days is not None:
        purged_before = dt.datetime.now(dt.UTC) - dt.timedelta(days=retention_days)
    mismatches = compare(units, executions, purged_before=purged_before)
    summary = _summary(units, executions, file)
    if not mismatches:
        console.print(f"reconcile clean: {summary} agree", highlight=False)
        return
    for mismatch in mismatches:
        typer.echo(mismatch.line())
    err_console.print(f"{len(mismatches)} mismatch(es): {summary}", highlight=False)
    raise typer.Exit(1)


async def _units() -> list[LedgerUnit]:
    return await read_units(await resolve_database_url(load_settings()))


def _summary(units: list[LedgerUnit], executions: list[Execution], file: Path) -> str:
    return f"{len(units)} unit(s) with a workflow_id, {len(executions)} execution(s) in {file.name}"
