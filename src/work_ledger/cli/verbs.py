"""The client verbs' command line, on plain argparse: such a verb never loads Typer or pydantic.

`main` (cli/__init__) hands `work-ledger VERB ARGS` for each verb of `CLIENT_VERBS` straight
to `run_verb`; the Typer app lists the same verbs in `work-ledger --help` and hands their
arguments here unparsed. A verb is one function in the module `CLIENT_VERBS` names, declared
with `@verb(arg(...), ...)`: argparse's own names and keywords per argument, plus the
environment variable read when it is not given. Usage errors exit 2, as Typer's did.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., None])

# verb -> the module under work_ledger.cli that declares it
CLIENT_VERBS = {
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
    "split": "shaping",
    "waive": "shaping",
    "budget": "budget",
    "bulk": "bulk",
    **dict.fromkeys(("cap", "pause", "resume", "controls"), "flow"),
    "hook": "hooks",
}
HELP = "Show this message and exit."


@dataclass(frozen=True)
class Arg:
    """One argument or option: argparse's names and keywords, and the variable that fills it.

    A positional argument without a `default` is required (unless its variable is set);
    positionals are matched in order, so a verb's first argument is never skipped."""

    names: tuple[str, ...]
    envvar: str | None
    options: dict[str, Any]

    @property
    def positional(self) -> bool:
        return not self.names[0].startswith("-")


def arg(*names: str, envvar: str | None = None, **options: Any) -> Arg:
    return Arg(names, envvar, options)


@dataclass(frozen=True)
class Verb:
    name: str
    func: Callable[..., None]
    args: tuple[Arg, ...]

    @property
    def help(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")


_DECLARED: dict[str, Verb] = {}


def verb(*args: Arg) -> Callable[[F], F]:
    """Declare a client verb named after the function, which gets one keyword per argument."""

    def declare(func: F) -> F:
        _DECLARED[func.__name__] = Verb(func.__name__, func, args)
        return func

    return declare


def import_verbs(module: str) -> None:
    """Import the module under work_ledger.cli that declares (or registers) some verbs."""
    # __import__, not importlib.import_module: `python -X importtime` (the test of what a
    # verb loads) only sees imports made through the import statement.
    __import__(f"work_ledger.cli.{module}")


def load(name: str) -> Verb:
    if name not in _DECLARED:
        import_verbs(CLIENT_VERBS[name])
    return _DECLARED[name]


def _parser(declared: Verb) -> tuple[argparse.ArgumentParser, list[tuple[Arg, argparse.Action]]]:
    parser = argparse.ArgumentParser(
        prog=f"work-ledger {declared.name}",
        description=declared.help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    actions = []
    skippable = False  # a positional before this one may be left out
    for a in declared.args:
        options = dict(a.options)
        if a.envvar:
            options["help"] = f"{options.get('help', '')} [env var: {a.envvar}]".strip()
        if a.positional:
            # Once one may be left out, every later one may too: argparse then matches the
            # given ones in order (else it would skip UNIT to fill the required QUESTION).
            skippable = skippable or bool(a.envvar) or "default" in options
            if skippable:
                options.setdefault("nargs", "?")
            options.setdefault("metavar", a.names[0].upper())
        actions.append((a, parser.add_argument(*a.names, **options)))
    parser.add_argument("--help", action="help", help=HELP)
    return parser, actions


def run_verb(name: str, argv: list[str]) -> None:
    """Parse `work-ledger NAME ARGV` and run the verb; its exit status is raised as SystemExit."""
    declared = load(name)
    parser, actions = _parser(declared)
    # A trailing command (`run -- CMD...`) keeps its own options: parse up to it only.
    trailing = any(a.options.get("nargs") == argparse.REMAINDER for a in declared.args)
    parsed = vars(parser.parse_args(argv) if trailing else parser.parse_intermixed_args(argv))
    for a, action in actions:
        value = parsed[action.dest]
        if isinstance(value, list) and value[:1] == ["--"]:
            value = value[1:]
        if value in (None, []) and a.envvar:
            value = os.environ.get(a.envvar) or None
        if value in (None, []) and a.positional and "default" not in a.options:
            hint = f" (or set {a.envvar})" if a.envvar else ""
            parser.error(f"missing argument {action.metavar}{hint}")
        parsed[action.dest] = value
    try:
        declared.func(**parsed)
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)
        raise SystemExit(1) from None
    except BrokenPipeError:
        # The reader went away (`events --json | head`): no traceback, and none again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
