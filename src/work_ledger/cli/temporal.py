"""`work-ledger temporal follow`: project workflow starts and closes from a Temporal server.

Reads Temporal (`--address`, `--namespace`; TLS and `WL_TEMPORAL_API_KEY` for Temporal
Cloud), writes through the ledger's ingest (`WL_URL`, a projector `WL_TOKEN`), and keeps
its checkpoint in the ledger's database (`WL_DATABASE_URL`, or the embedded server under
`WL_HOME`). The Temporal options are shared with `reconcile --temporal`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from work_ledger.cli.typer_app import app, err_console
from work_ledger.config import load_settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.errors import WorkLedgerError

if TYPE_CHECKING:
    from work_ledger.temporal.executions import Connection
    from work_ledger.temporal.follower import FollowSettings, PassReport

temporal_app = typer.Typer(help="Follow a Temporal server (DESIGN §9).", no_args_is_help=True)
app.add_typer(temporal_app, name="temporal")

Address = Annotated[
    str, typer.Option(envvar="WL_TEMPORAL_ADDRESS", help="Temporal frontend host:port.")
]
Namespace = Annotated[str, typer.Option(envvar="WL_TEMPORAL_NAMESPACE", help="Namespace.")]
Tls = Annotated[bool, typer.Option(help="Use TLS (on by itself with WL_TEMPORAL_API_KEY).")]
TlsFile = Annotated[Path | None, typer.Option(exists=True, dir_okay=False, readable=True)]


def connection(
    address: str,
    namespace: str,
    tls: bool,
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> Connection:
    """The Temporal connection the options name; the API key comes from the environment
    only (WL_TEMPORAL_API_KEY), never from a command line."""
    try:
        from work_ledger.temporal.executions import Connection
    except ImportError as exc:
        err_console.print(f"[red]missing_extra[/red]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    api_key = os.environ.get("WL_TEMPORAL_API_KEY") or None
    return Connection(address, namespace, tls, tls_ca, tls_cert, tls_key, api_key)


@temporal_app.command()
def follow(
    address: Address = "127.0.0.1:7233",
    namespace: Namespace = "default",
    tls: Tls = False,
    tls_ca: TlsFile = None,
    tls_cert: TlsFile = None,
    tls_key: TlsFile = None,
    once: Annotated[bool, typer.Option(help="One catch-up pass, then exit.")] = False,
    evidence_url_template: Annotated[
        str | None,
        typer.Option(
            help="Evidence link of a completed run whose result carries no evidence_url; "
            "{namespace}, {workflow_id}, {run_id} are filled in."
        ),
    ] = None,
    interval: Annotated[
        float,
        typer.Option(
            min=0.05,
            help="Seconds from one pass's start to the next's (a longer pass is followed at once).",
        ),
    ] = 1.0,
    lag: Annotated[float, typer.Option(min=0, help="Newest seconds left to settle.")] = 0.5,
    overlap: Annotated[
        float, typer.Option(min=0, help="Seconds before the checkpoint swept again.")
    ] = 60.0,
    lookback: Annotated[
        float, typer.Option(min=0, help="First run: seconds of closes to catch up on.")
    ] = 3600.0,
    describe_every: Annotated[
        float, typer.Option(min=0, help="Seconds between describes of the held units.")
    ] = 30.0,
) -> None:
    """Project every start and close of the workflows units carry, from Temporal itself.

    Prints one JSON line per pass that found something. Exit 0 after `--once`; 1 when a
    pass failed (Temporal, the ledger or its database unreachable: run it again, nothing
    is lost); 2 when the ledger refuses the projector (token, URL).
    """
    from work_ledger.temporal.follower import FollowSettings

    conn = connection(address, namespace, tls, tls_ca, tls_cert, tls_key)
    settings = FollowSettings(
        interval, lag, overlap, lookback, describe_every, evidence_url_template
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_follow(conn, settings, once=once))
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(1) from None


async def _follow(conn: Connection, settings: FollowSettings, *, once: bool) -> None:
    from work_ledger.temporal.checkpoint import FollowState
    from work_ledger.temporal.executions import TemporalReader
    from work_ledger.temporal.follower import Follower
    from work_ledger.temporal.forwarder import ForwardRefused, LedgerForwarder

    ledger = load_settings()
    if not ledger.token:
        err_console.print(
            "[red]missing_token[/red]: set WL_TOKEN to a projector token "
            "(work-ledger token create --role projector --principal temporal)",
            highlight=False,
        )
        raise typer.Exit(2)
    state = FollowState(await resolve_database_url(ledger))
    reader = TemporalReader(await conn.client())
    forwarder = LedgerForwarder(ledger.url, ledger.token)
    follower = Follower(reader, state, forwarder, namespace=conn.namespace, settings=settings)
    try:
        if once:
            _print(await follower.run_pass(describe=True), always=True)
            return
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await follower.follow(stop, _print)
    except ForwardRefused as exc:
        err_console.print(f"[red]projector_refused[/red]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    except Exception as exc:  # --once: Temporal or the ledger could not be reached
        err_console.print(
            f"[red]pass_failed[/red]: {type(exc).__name__}: {exc}; the checkpoint did not "
            "move, run it again",
            highlight=False,
        )
        raise typer.Exit(1) from None


def _print(report: PassReport, *, always: bool = False) -> None:
    if always or report.sent or report.without_evidence or report.rejected:
        typer.echo(json.dumps(report.as_json()))
