"""Server-side verbs: they open the database directly (serve, migrate, audit)."""

from __future__ import annotations

import signal
import ssl
from pathlib import Path
from typing import NoReturn

import typer
from rich.table import Table

from work_ledger.cli.typer_app import app, console, err_console, run_async
from work_ledger.config import DEFAULT_PORT, load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.runtime import migrate_ledger, open_ledger


@app.command()
def migrate() -> None:
    """Apply pending migrations to the ledger database and exit (before rolling out a
    release whose replicas start with `serve --no-migrate`)."""

    async def _migrate() -> list[str]:
        settings = load_settings()
        return await migrate_ledger(settings, await resolve_database_url(settings))

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


def _stopped(_signum: int, _frame: object) -> None:
    # A stop asked for is a clean stop: Kubernetes and systemd count the default exit
    # status of SIGTERM (143) as a failure.
    raise SystemExit(0)


async def _first_token(host: str, *, migrate: bool) -> None:
    """Before binding: store WL_OPERATOR_TOKEN_FILE's token if the ledger has none (a bad
    file refuses here, named); then, on a non-loopback address, refuse a ledger that still
    has no token."""
    from work_ledger.api.app import is_loopback
    from work_ledger.service.tokens import TokenStore, first_operator_from_file, load_secret

    settings = load_settings()
    async with open_ledger(settings, max_connections=1, migrate=migrate) as ledger:
        tokens = TokenStore(ledger.store, load_secret(settings.secret, settings.home))
        if await first_operator_from_file(tokens, settings.operator_token_file):
            err_console.print(
                f"No API token existed: stored the operator token of "
                f"{settings.operator_token_file} (WL_OPERATOR_TOKEN_FILE)",
                highlight=False,
                markup=False,
            )
        if not is_loopback(host) and await tokens.count_live() == 0:
            err_console.print(
                f"refusing to serve on {host}: no API token exists yet, so anyone could reach "
                "an unprotected ledger. Mount a token made by `work-ledger token new` and name "
                "it in WL_OPERATOR_TOKEN_FILE, run `work-ledger token create --role operator "
                "--principal NAME` first, or serve on 127.0.0.1 once to mint the first "
                "operator token.",
                highlight=False,
            )
            raise typer.Exit(1)


def _refuse(message: str) -> NoReturn:
    err_console.print(message, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(1)


def _tls_files(cert: Path | None, key: Path | None) -> tuple[str, str] | None:
    """uvicorn's TLS options, once the pair is known to load (a bad file fails here,
    named, rather than as a traceback from inside uvicorn)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        _refuse(
            "--tls-cert and --tls-key (WL_TLS_CERT, WL_TLS_KEY) go together: give the PEM "
            "certificate chain and its private key, or neither"
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        _refuse(
            f"cannot use the TLS certificate {cert} with the key {key} ({exc}); give a PEM "
            "certificate chain and the private key that matches it"
        )
    return str(cert), str(key)


def _check_plain_http(host: str, tls: bool, allow_plain_http: bool) -> None:
    """A non-loopback bind without TLS would carry bearer tokens in clear: only on request."""
    from work_ledger.api.app import is_loopback

    if tls or is_loopback(host):
        return
    if not allow_plain_http:
        _refuse(
            f"refusing to serve plain HTTP on {host}: bearer tokens would cross the network "
            "in clear. Give --tls-cert and --tls-key (WL_TLS_CERT, WL_TLS_KEY), or, behind a "
            "TLS-terminating proxy on a network you trust, pass --allow-plain-http."
        )
    err_console.print(
        f"WARNING: serving plain HTTP on {host} (--allow-plain-http): bearer tokens and ledger "
        "data cross the network in clear, readable by anyone on the path. Only do this "
        "behind a TLS-terminating proxy on a network you trust.",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


CertOption = typer.Option(
    None, "--tls-cert", envvar="WL_TLS_CERT", help="PEM certificate chain: serve HTTPS."
)
KeyOption = typer.Option(
    None, "--tls-key", envvar="WL_TLS_KEY", help="PEM private key of --tls-cert."
)
NoMigrateOption = typer.Option(
    False,
    "--no-migrate",
    help="Apply no migration: refuse to start if the ledger lacks one this release needs "
    "(run `work-ledger migrate` first; docs/postgresql.md, upgrades).",
)
PlainOption = typer.Option(
    False,
    "--allow-plain-http",
    help="Serve plain HTTP on a non-loopback address (behind a TLS-terminating proxy).",
)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)."),
    port: int = typer.Option(DEFAULT_PORT, help="Port to listen on."),
    tls_cert: Path | None = CertOption,
    tls_key: Path | None = KeyOption,
    allow_plain_http: bool = PlainOption,
    no_migrate: bool = NoMigrateOption,
) -> None:
    """Apply migrations, then serve the HTTP API (HTTPS with --tls-cert and --tls-key).

    With no API token yet, mints an operator token (saved 0600 to WL_HOME/operator.token,
    whose path it prints, never the token), and refuses to bind a non-loopback address; a
    non-loopback address also needs TLS, or --allow-plain-http behind a TLS-terminating proxy."""
    import uvicorn

    from work_ledger.api.access_log import configure_logging
    from work_ledger.api.app import create_app, is_loopback
    from work_ledger.api.connection import raise_open_files, server_options
    from work_ledger.api.serving import DrainingServer

    tls = _tls_files(tls_cert, tls_key)
    _check_plain_http(host, tls is not None, allow_plain_http)
    configure_logging()
    # uvicorn re-raises SIGTERM after its graceful shutdown; exiting through SystemExit
    # instead runs the atexit hooks, so the embedded PostgreSQL stops with us (and exits 0).
    signal.signal(signal.SIGTERM, _stopped)
    needed, open_files = raise_open_files()
    if open_files < needed:
        err_console.print(
            f"warning: at most {open_files} open files (the hard limit); {needed} let serve hold "
            f"its 2,048 connections. Raise the hard limit: `ulimit -Hn {needed}`, or "
            f"LimitNOFILE={needed} in a systemd unit.",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if not is_loopback(host) or load_settings().operator_token_file is not None:
        run_async(_first_token(host, migrate=not no_migrate))
    application = create_app(load_settings(), host=host, bootstrap=True, migrate=not no_migrate)
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        loop="uvloop",
        access_log=False,
        log_level="warning",
        ssl_certfile=tls and tls[0],
        ssl_keyfile=tls and tls[1],
        **server_options(),  # header size, read deadlines, keep-alive, connection cap
    )
    server = DrainingServer(config, application)
    server.run()
    if not server.started:  # start-up failed: uvicorn logged why
        raise typer.Exit(3)
