"""`work-ledger report` (the read-side views as terminal lists a person can read at any
width, or `--json` for scripts) and `work-ledger grant-reader` (the PostgreSQL role
Grafana reads them with). Both talk to the database directly."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from work_ledger.cli.fit import render
from work_ledger.cli.report_course import course_lines
from work_ledger.cli.report_sections import sections, when
from work_ledger.cli.typer_app import app, console, err_console, run_async
from work_ledger.config import load_settings
from work_ledger.db.connect import connect, resolve_database_url
from work_ledger.errors import WorkLedgerError
from work_ledger.readside.pool import connect_reader
from work_ledger.readside.report import Report, read_report
from work_ledger.readside.roles import grant_reader
from work_ledger.runtime import migrate_database


def render_report(report: Report, *, top: int | None = 20, width: int | None = None) -> Group:
    """The report as rich renderables, one list per view, fitted to `width` columns."""
    fit = console.width if width is None else width
    opening = [Text(line, overflow="fold") for line in course_lines(report)]
    return Group(*opening, Text(""), *(render(section, fit) for section in sections(report, top)))


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.date):  # datetimes too
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def report_json(report: Report) -> str:
    """The report's rows as JSON: numbers as numbers, moments as ISO 8601."""
    return json.dumps(dataclasses.asdict(report), default=_plain, indent=2)


async def _read_once(domain: str | None, top: int, stalls: int | None) -> Report:
    conn = await connect_reader(load_settings())
    try:
        return await read_report(conn, domain=domain, top=top, stalls=stalls)
    finally:
        await conn.close()


async def watch_report(domain: str | None, interval: float, rounds: int | None = None) -> None:
    """Redraw the report every `interval` seconds (`rounds` times, or until cancelled)."""
    conn = await connect_reader(load_settings())
    try:
        with Live(console=console, auto_refresh=False) as live:
            done = 0
            while rounds is None or done < rounds:
                try:
                    shown: Any = render_report(await read_report(conn, domain=domain))
                except WorkLedgerError as exc:
                    shown = Text(f"{exc.code}: {exc.detail} (retrying)", style="red")
                stamp = Text(f"as of {when(dt.datetime.now(dt.UTC))}; Ctrl-C to stop", "dim")
                live.update(Group(shown, stamp), refresh=True)
                done += 1
                if rounds is None or done < rounds:
                    await asyncio.sleep(interval)
    finally:
        await conn.close()


@app.command()
def report(
    domain: Annotated[
        str | None, typer.Option(help="Show this domain only (default: every domain and totals).")
    ] = None,
    watch: Annotated[
        bool, typer.Option(help="Redraw every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.5, help="Seconds between redraws.")] = 5.0,
    top: Annotated[
        int, typer.Option(min=1, max=500, help="Rows of each list (the worst first).")
    ] = 20,
    all_domains: Annotated[
        bool, typer.Option("--all", help="Every domain's row, not the --top worst.")
    ] = False,
    stalls: Annotated[
        bool, typer.Option("--stalls", help="Every stalled unit, not the --top longest silent.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="The rows as JSON, for scripts (no tables).")
    ] = False,
) -> None:
    """Print the read-side views as lists that fit the terminal, straight from the database.

    Each list shows its worst rows first (--top of them) and says how many it left out."""
    if not watch:
        read = run_async(_read_once(domain, top, None if stalls else top))
        if as_json:
            typer.echo(report_json(read))
        else:
            console.print(render_report(read, top=None if all_domains else top))
        return
    try:
        run_async(watch_report(domain, interval))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


async def _grant(role_name: str, password: str) -> list[str]:
    url = await resolve_database_url(load_settings())
    await migrate_database(url)
    conn = await connect(url)
    try:
        return await grant_reader(conn, role_name, password)
    finally:
        await conn.close()


PasswordFileOption = typer.Option(
    None,
    "--password-file",
    help="A file whose first line is the password (or set WL_READER_PASSWORD; prompted "
    "when neither is given). Never on the command line, where `ps` shows it to every user.",
)


def _reader_password(password_file: Path | None) -> str:
    if password_file is not None:
        lines = password_file.read_text().splitlines()
        return lines[0] if lines else ""
    return os.environ.get("WL_READER_PASSWORD") or typer.prompt(
        "Password", hide_input=True, confirmation_prompt=True
    )


@app.command("grant-reader")
def grant_reader_command(
    role_name: Annotated[str, typer.Option(help="The PostgreSQL role to create or update.")],
    password_file: Path | None = PasswordFileOption,
) -> None:
    """Create or update a LOGIN role that may SELECT the views and nothing else."""
    views = run_async(_grant(role_name, _reader_password(password_file)))
    err_console.print(
        f"role {role_name} may now SELECT {', '.join(views)} and nothing else; "
        "point Grafana's datasource at it (deploy/grafana/)",
        highlight=False,
    )
