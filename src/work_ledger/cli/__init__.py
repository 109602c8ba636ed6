"""The `work-ledger` command line.

The client verbs (claim ... run, `cli/verbs.py`) are parsed with plain argparse, so they
load neither Typer nor pydantic; the server and operator verbs are one Typer app
(`cli/typer_app.py`), whose modules load one verb at a time. `work-ledger --help` lists
both.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from work_ledger.cli.typer_app import app as app


def main() -> None:
    # httpx imports its own command line (click, rich, pygments) whenever they are
    # installed, a third of a client verb's start-up; this process never uses it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from work_ledger.cli.verbs import CLIENT_VERBS, run_verb

    if len(sys.argv) > 1 and sys.argv[1] in CLIENT_VERBS:
        run_verb(sys.argv[1], sys.argv[2:])
        return
    from work_ledger.cli.typer_app import app

    app()


def __getattr__(name: str) -> Any:
    # The Typer app is imported on first use of `app`, never by a client verb.
    if name == "app":
        from work_ledger.cli.typer_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
