"""The Typer application that every CLI module adds its verbs to, loaded verb by verb.

A verb's module is imported only when that verb runs (all of them for `--help`), so a
client verb never loads the server's modules, the MCP SDK, or rich unless it draws. To
add a verb: write it with `@app.command()` (or `app.add_typer`) in a module under `cli/`,
and name it in `VERBS` below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer
from typer.core import TyperGroup

from work_ledger.errors import WorkLedgerError

if TYPE_CHECKING:
    from rich.console import Console
    from typer._click import Command, Context

T = TypeVar("T")

# verb (or verb group) -> the module under work_ledger.cli that registers it
VERBS = {
    **dict.fromkeys(
        (
            "claim",
            "start",
            "heartbeat",
            "block",
            "answer",
            "cost",
            "verify",
            "dispose",
            "release",
            "show",
            "events",
            "questions",
        ),
        "agent",
    ),
    "register": "register",
    "run": "run",
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


class LazyVerbs(TyperGroup):
    """Imports a verb's module when the verb is asked for, then finds it among the registered."""

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
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
        return super().list_commands(ctx)

    def _load(self, module: str) -> str | None:
        """Import a verb module and take its verbs; the missing package's name if it lacks one."""
        try:
            # __import__, not importlib.import_module: `python -X importtime` (the test of
            # what a verb loads) only sees imports made through the import statement.
            __import__(f"work_ledger.cli.{module}")
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


class _LazyConsole:
    """A rich Console made on first use, so a verb that draws nothing never imports rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def _made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    # Dunder methods bypass __getattr__; rich's Live and Progress enter the console.
    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._made().__exit__(*exc)


console = cast("Console", _LazyConsole())
err_console = cast("Console", _LazyConsole(stderr=True))


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; a ledger error becomes a one-line message and exit status 1."""
    try:
        return asyncio.run(coro)
    except WorkLedgerError as exc:
        err_console.print(f"[red]{exc.code}[/red]: {exc.detail}", highlight=False)
        raise typer.Exit(1) from None
