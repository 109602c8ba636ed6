"""The `work-ledger` command line: one Typer app, its verbs grouped by module."""

from __future__ import annotations

from work_ledger.cli import agent as _agent  # noqa: F401  (registers the agent verbs)
from work_ledger.cli import mcp as _mcp  # noqa: F401  (registers mcp)
from work_ledger.cli import reconcile as _reconcile  # noqa: F401  (registers reconcile)
from work_ledger.cli import register as _register  # noqa: F401  (registers register)
from work_ledger.cli import report as _report  # noqa: F401  (registers report, grant-reader)
from work_ledger.cli import run as _run  # noqa: F401  (registers run)
from work_ledger.cli import server as _server  # noqa: F401  (registers serve, migrate, audit)
from work_ledger.cli import tokens as _tokens  # noqa: F401  (registers token create|list|revoke)
from work_ledger.cli.app import app


def main() -> None:
    app()
