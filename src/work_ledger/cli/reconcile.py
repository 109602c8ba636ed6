"""`work-ledger reconcile FILE | --temporal`: the ledger against workflow executions, read
from an export or straight from a Temporal server."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from work_ledger.cli.temporal import Address, Namespace, Tls, TlsFile, connection
from work_ledger.cli.typer_app import app, console, err_console
from work_ledger.config import load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.errors import WorkLedgerError

if TYPE_CHECKING:
    from work_ledger.temporal.executions import Connection
from work_ledger.temporal.reconcile import (
    Execution,
    LedgerUnit,
    compare,
    load_executions,
    read_units,
)


@app.command()
def reconcile(
    file: Annotated[
        Path | None,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            help="JSON or CSV export of workflow executions (workflow_id, status, close_time).",
        ),
    ] = None,
    temporal: Annotated[
        bool, typer.Option("--temporal", help="Read the executions from the Temporal server.")
    ] = False,
    address: Address = "127.0.0.1:7233",
    namespace: Namespace = "default",
    tls: Tls = False,
    tls_ca: TlsFile = None,
    tls_cert: TlsFile = None,
    tls_key: TlsFile = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Temporal's retention: closed units disposed longer ago than this are not "
            "reported when their execution is missing from the export.",
        ),
    ] = None,
) -> None:
    """Compare every unit that has a workflow_id with the executions and print each mismatch.

    The executions come from FILE, or with --temporal from the server: each unit's
    workflow described (its newest run, strongly consistent) plus every running execution.
    Exit 0: they agree; 1: mismatches (one per line: kind, unit, what differs); 2: the
    executions or the database could not be read. Read-only: the ledger is never changed.
    """
    if (file is None) == (not temporal):
        err_console.print(
            "[red]invalid_input[/red]: give an export FILE or --temporal (one of them)",
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        units = asyncio.run(_units())
        if file is not None:
            executions, source = load_executions(file), file.name
        else:
            conn = connection(address, namespace, tls, tls_ca, tls_cert, tls_key)
            executions = asyncio.run(_from_temporal(conn, [u.workflow_id for u in units]))
            source = f"Temporal {address} namespace {namespace}"
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(2) from None
    except (OSError, RuntimeError) as exc:  # Temporal unreachable
        err_console.print(f"[red]temporal_unavailable[/red]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    purged_before = None
    if retention_days is not None:
        purged_before = dt.datetime.now(dt.UTC) - dt.timedelta(days=retention_days)
    mismatches = compare(units, executions, purged_before=purged_before)
    summary = _summary(units, executions, source)
    if not mismatches:
        console.print(f"reconcile clean: {summary} agree", highlight=False)
        return
    for mismatch in mismatches:
        typer.echo(mismatch.line())
    err_console.print(f"{len(mismatches)} mismatch(es): {summary}", highlight=False)
    raise typer.Exit(1)


async def _units() -> list[LedgerUnit]:
    return await read_units(await resolve_database_url(load_settings()))


async def _from_temporal(conn: Connection, workflow_ids: list[str]) -> list[Execution]:
    from work_ledger.temporal.executions import TemporalReader, every_execution

    return await every_execution(TemporalReader(await conn.client()), workflow_ids)


def _summary(units: list[LedgerUnit], executions: list[Execution], source: str) -> str:
    return f"{len(units)} unit(s) with a workflow_id, {len(executions)} execution(s) in {source}"
