"""`work-ledger report` (the read-side views as terminal tables) and `work-ledger grant-reader`
(the PostgreSQL role Grafana reads them with). Both talk to the database directly."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from work_ledger.cli.typer_app import app, console, err_console, run_async
from work_ledger.config import load_settings
from work_ledger.db.connect import connect, resolve_database_url
from work_ledger.errors import WorkLedgerError
from work_ledger.readside.pool import connect_reader
from work_ledger.readside.report import Report, read_report
from work_ledger.readside.roles import grant_reader
from work_ledger.runtime import migrate_database

STATE_COLUMNS = ("ready", "claimed", "in_progress", "blocked", "verified", "done", "abandoned")


def _money(cents: int | Decimal | None) -> str:
    return "—" if cents is None else f"${Decimal(cents) / 100:,.2f}"


def _rate(rate: Decimal | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def _ago(seconds: int) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _when(moment: dt.datetime | None) -> str:
    return "—" if moment is None else moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _label(row: dict[str, Any]) -> str:
    return "all domains" if row["scope"] == "total" else str(row["domain"])


# Columns of text read left-aligned; the rest are numbers, right-aligned.
TEXT_COLUMNS = frozenset(
    {
        "assignee group",
        "domain",
        "unit",
        "state",
        "holder",
        "disposition",
        "evidence links",
        "last heartbeat",
    }
)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    return table


def queue_table(report: Report) -> Table:
    table = _table("v_queue_depth — units by state", "domain", *STATE_COLUMNS, "open", "units")
    for row in report.queue_depth:
        cells = [str(row[c]) for c in (*STATE_COLUMNS, "open", "units")]
        table.add_row(_label(row), *cells, style="bold" if row["scope"] == "total" else None)
    return table


def stall_table(report: Report) -> Table:
    threshold = report.stalls[0]["stall_threshold_seconds"] if report.stalls else None
    title = "v_stall_list — leased units silent past the stall threshold"
    if threshold is not None:
        title += f" ({threshold}s)"
    table = _table(title, "unit", "domain", "state", "holder", "attempt", "last heartbeat")
    table.add_column("lease expires")
    table.add_column("silent for", justify="right")
    for row in report.stalls:
        lease = _when(row["lease_expires_at"]) + (" (lapsed)" if row["lease_expired"] else "")
        table.add_row(
            row["external_ref"],
            row["domain"],
            row["state"],
            row["holder"],
            str(row["attempt_no"]),
            _when(row["last_heartbeat_at"]),
            lease,
            _ago(row["stalled_seconds"]),
        )
    if not report.stalls:
        table.add_row("no stalled units", *[""] * 7)
    return table


def cost_table(report: Report) -> Table:
    table = _table(
        "v_cost_per_unit — spend",
        "domain",
        "units",
        "attempts",
        "cost",
        "per unit",
        "merged",
        "per merged unit",
        "all spend per merged",
    )
    for row in report.costs:
        table.add_row(
            _label(row),
            str(row["units"]),
            str(row["attempts"]),
            _money(row["cost_cents"]),
            _money(row["cost_per_unit_cents"]),
            str(row["merged_units"]),
            _money(row["cost_per_merged_unit_cents"]),
            _money(row["spend_per_merged_unit_cents"]),
            style="bold" if row["scope"] == "total" else None,
        )
    return table


def costliest_table(report: Report) -> Table:
    table = _table("costliest units", "unit", "domain", "state", "attempts", "cost")
    for row in report.costliest:
        state = row["disposition"] or row["state"]
        table.add_row(
            row["external_ref"],
            row["domain"],
            str(state),
            str(row["attempts"]),
            _money(row["cost_cents"]),
        )
    return table


def rework_table(report: Report) -> Table:
    table = _table(
        "v_rework — units that needed more than one attempt",
        "domain",
        "attempted",
        "reworked",
        "rework rate",
        "extra attempts",
        "lost to lapsed lease",
        "released",
    )
    for row in report.rework:
        table.add_row(
            _label(row),
            str(row["attempted_units"]),
            str(row["reworked_units"]),
            _rate(row["rework_rate"]),
            str(row["extra_attempts"]),
            str(row["superseded_attempts"]),
            str(row["released_attempts"]),
            style="bold" if row["scope"] == "total" else None,
        )
    for row in report.reworked:
        table.add_row(
            Text(f"  {row['external_ref']}", style="dim"),
            "",
            "",
            "",
            f"{row['attempts']} attempts",
            str(row["superseded_attempts"]),
            str(row["released_attempts"]),
        )
    return table


def disposition_table(report: Report) -> Table:
    where = f" in {report.domain}" if report.domain else ""
    table = _table(
        f"v_disposition_summary — the kill-gate table{where}",
        "disposition",
        "units",
        "attempts",
        "cost",
        "per unit",
        "without evidence",
        "evidence links",
    )
    for row in report.dispositions:
        links = row["evidence_urls"]
        shown = "\n".join(links[:3]) + (f"\n… {len(links) - 3} more" if len(links) > 3 else "")
        table.add_row(
            str(row["disposition"]),
            str(row["units"]),
            str(row["attempts"]),
            _money(row["cost_cents"]),
            _money(row["cost_per_unit_cents"]),
            str(row["units_without_evidence"]),
            shown or "—",
        )
    return table


def _seconds(value: Decimal | int | None) -> str:
    return "—" if value is None else _ago(int(value))


def question_wait_table(report: Report) -> Table:
    table = _table(
        "v_question_wait — units waiting on people",
        "assignee group",
        "open",
        "not routed",
        "oldest open",
        "median open",
        "answered",
        "answer p50",
        "answer p90",
    )
    for row in report.question_wait:
        label = row["domain"] if row["scope"] == "domain" else row["assignee_group_slug"]
        table.add_row(
            "all groups" if row["scope"] == "total" else str(label),
            str(row["open_questions"]),
            str(row["unrouted_questions"]),
            _seconds(row["oldest_open_seconds"] if row["open_questions"] else None),
            _seconds(row["open_p50_seconds"]),
            str(row["answered_questions"]),
            _seconds(row["answer_p50_seconds"]),
            _seconds(row["answer_p90_seconds"]),
            style="bold" if row["scope"] == "total" else None,
        )
    return table


def render_report(report: Report) -> Group:
    """The report as rich renderables, one table per view."""
    return Group(
        queue_table(report),
        stall_table(report),
        cost_table(report),
        costliest_table(report),
        rework_table(report),
        disposition_table(report),
        question_wait_table(report),
    )


async def _read_once(domain: str | None) -> Report:
    conn = await connect_reader(load_settings())
    try:
        return await read_report(conn, domain=domain)
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
                stamp = Text(f"as of {_when(dt.datetime.now(dt.UTC))}; Ctrl-C to stop", "dim")
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
) -> None:
    """Print the read-side views as tables, straight from the database."""
    if not watch:
        console.print(render_report(run_async(_read_once(domain))))
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
