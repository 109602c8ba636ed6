"""Server-side verbs: they open the database directly (serve, migrate, audit)."""

from __future__ import annotations

import signal

import typer
from rich.table import Table

from work_ledger.cli.app import app, console, err_console, run_async
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
        async with open_ledger(load_settings(), max_connections=1, unbounded=True) as ledger:
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


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


async def _refuse_public_without_tokens(host: str) -> None:
    from work_ledger.auth import TokenStore, load_secret

    settings = load_settings()
    async with open_ledger(settings, max_connections=1) as ledger:
        tokens = TokenStore(ledger.store, load_secret(settings.secret, settings.home))
        if await tokens.count_live() == 0:
            err_console.print(
                f"refusing to serve on {host}: no API token exists yet, so anyone could reach "
                "an unprotected ledger. Run `work-ledger token create --role operator "
                "--principal NAME` first, or serve on 127.0.0.1 once to mint the first "
                "operator token.",
                highlight=False,
            )
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

    from work_ledger.api.app import create_app, is_loopback
    from work_ledger.api.middleware import configure_logging

    configure_logging()
    # uvicorn re-raises SIGTERM after its graceful shutdown; exiting through SystemExit
    # instead runs the atexit hooks, so the embedded PostgreSQL stops with us.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if not is_loopback(host):
        run_async(_refuse_public_without_tokens(host))
    uvicorn.run(
        create_app(load_settings(), host=host, bootstrap=True),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )
