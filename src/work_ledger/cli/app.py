"""The Typer application that every CLI module adds its verbs to."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console

from work_ledger.errors import WorkLedgerError

T = TypeVar("T")

app = typer.Typer(
    name="work-ledger",
    help="The durable accounting ledger for fleets of AI coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; a ledger error becomes a one-line message and exit status 1."""
    try:
        return asyncio.run(coro)
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(1) from None
