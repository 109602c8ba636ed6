"""The Typer application of the server and operator verbs, loaded verb by verb.

A verb's module is imported only when that verb runs (all of them for `--help`), so a
verb never loads the server's modules, the MCP SDK, or rich unless it draws. To add a
verb: write it with `@app.command()` (or `app.add_typer`) in a module under `cli/`, and
name it in `VERBS` below. The client verbs (claim ... run) are not Typer commands: they
are parsed by `cli/verbs.py` on plain argparse; the app lists them and hands them there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from work_ledger.cli.agent_client import JSON_HELP
from work_ledger.cli.console import console, err_console
from work_ledger.cli.verbs import CLIENT_VERBS, import_verbs, load, run_verb
from work_ledger.errors import WorkLedgerError

if TYPE_CHECKING:
    from typer._click import Command, Context

__all__ = ["VERBS", "JsonOption", "app", "console", "err_console", "run_async"]

T = TypeVar("T")

# verb (or verb group) -> the module under work_ledger.cli that registers it
VERBS = {
    "mcp": "mcp",
    "serve": "server",
    "migrate": "server",
    "audit": "server",
    "token": "tokens",
    "report": "report",
    "grant-reader": "report",
    "reconcile": "reconcile",
    "temporal": "temporal",
    "route": "triage",
    **dict.fromkeys(("backup", "restore", "export"), "safekeeping"),
}

JsonOption = typer.Option(False, "--json", help=JSON_HELP)


class ClientVerb(TyperCommand):
    """A client verb as the app lists it: its arguments go to argparse (`run_verb`) unparsed."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        ctx.args = list(args)
        return ctx.args

    def invoke(self, ctx: Context) -> None:
        assert self.name is not None
        run_verb(self.name, ctx.args)


class LazyVerbs(TyperGroup):
    """Imports a verb's module when the verb is asked for, then finds it among the registered."""

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in CLIENT_VERBS:
            return ClientVerb(cmd_name, help=load(cmd_name).help, add_help_option=False)
        if cmd_name not in self.commands and cmd_name in VERBS:
            missing = self._load(VERBS[cmd_name])
            if missing is not None:
                raise typer.BadParameter(
                    f"`{cmd_name}` needs {missing}, which this slim install lacks: install "
                    "`work-ledger[server]` for the server's verbs, or `work-ledger[mcp]` for "
                    "the stdio MCP server",
                    param_hint="VERB",
                )
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Context) -> list[str]:
        for module in sorted(set(VERBS.values())):
            self._load(module)  # a verb whose extra is not installed is left out of --help
        return [*CLIENT_VERBS, *super().list_commands(ctx)]

    def _load(self, module: str) -> str | None:
        """Import a verb module and take its verbs; the missing package's name if it lacks one."""
        try:
            import_verbs(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "work_ledger").startswith("work_ledger"):
                raise
            return exc.name
        built = typer.main.get_command(app)
        assert isinstance(built, TyperGroup)
        self.commands.update(built.commands)
        return None


app = typer.Typer(
    name="work-ledger",
    help="The durable accounting ledger for fleets of AI coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyVerbs,
)


@app.callback()
def _verbs() -> None:
    # A callback keeps the app a group of verbs even while only one verb is loaded.
    pass


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; a ledger error becomes a one-line message and exit status 1."""
    try:
        return asyncio.run(coro)
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(1) from None
