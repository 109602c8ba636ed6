"""Server-side verbs: they open the database directly (serve, migrate, audit)."""

from __future__ import annotations

import typer
from rich.table import Table

from work_ledger.cli.app import app, console, run_async
from work_ledger.config import DEFAULT_PORT, load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.runtime import migrate_database, open_ledger


@app.command()
def migrate() -> None:
    """Apply pending migrations to the ledger database and exit."""

    async def _migrate() -> list[str]:
        return await migrate_database(await resolve_database_url(load_settings()))

    applied = run_async(_migrate())
    console.print(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m}" for m in applied))


@app.command()
def audit() -> None:
    """Replay the event log and check every invariant; exit 1 listing each violation."""

    async def _audit() -> list[tuple[str, str, str]]:
        async with open_ledger(load_settings(), max_connections=1) as ledger:
            return [(v.external_ref, v.rule, v.detail) for v in await ledger.audit()]

    violations = run_async(_audit())
    if not violations:
        console.print("audit clean: every unit agrees with its event log and invariants")
        return
    table = Table("unit", "rule", "detail", title=f"{len(violations)} violation(s)")
    for row in violations:
        table.add_row(*row)
    console.print(table)
    raise typer.Exit(1)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)."),
    port: int = typer.Option(DEFAULT_PORT, help="Port to listen on."),
) -> None:
    """Apply migrations, then serve the HTTP API.

    With no API token yet, mints an operator token (printed once, saved 0600 to
    WL_HOME/operator.token), and refuses to bind a non-loopback address."""
    import uvicorn

    from work_ledger.api.app import create_app
    from work_ledger.api.middleware import configure_logging

    configure_logging()
    uvicorn.run(
        create_app(load_settings(), host=host, bootstrap=True),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )
