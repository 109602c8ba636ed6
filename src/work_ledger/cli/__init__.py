"""The `work-ledger` command line: one Typer app, its verbs loaded one module at a time.

`cli/app.py` names each verb's module in `VERBS`; only the module of the verb being run
is imported.
"""

from __future__ import annotations

import sys

from work_ledger.cli.app import app


def main() -> None:
    # httpx imports its own command line (click, rich, pygments) whenever they are
    # installed, a third of a client verb's start-up; this process never uses it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    app()
