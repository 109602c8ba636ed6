"""What every verb that talks to the server shares: its client, exit codes and error report.

Exit codes of every verb that talks to the server (scripts branch on them):

    0  done
    1  any other error (bad input, unknown unit, a bad row in a registered file)
    2  usage error (a missing or malformed argument)
    3  nothing to claim
    4  refused by a ledger invariant (409, including a lost claim: attempt_superseded)
    5  auth: missing, unknown or revoked token, or a role or holder that may not do this
    6  unreachable: the server cannot be reached, or its database is unavailable
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from work_ledger.cli.console import err_console
from work_ledger.cli.verbs import arg
from work_ledger.client import Client, NothingToClaim, to_json
from work_ledger.config import load_settings
from work_ledger.errors import (
    Forbidden,
    InvariantViolation,
    Unauthorized,
    Unavailable,
    WorkLedgerError,
)

EXIT_ERROR = 1
EXIT_NOTHING_TO_CLAIM = 3
EXIT_REFUSED = 4
EXIT_AUTH = 5
EXIT_UNREACHABLE = 6
OPERATOR_TOKEN_FILE = "operator.token"

JSON_HELP = "Print JSON for scripts instead of tables."
JSON = arg("--json", dest="as_json", action="store_true", help=JSON_HELP)
# The options `claim` and `run` share.
CLAIM_UNIT = arg("--unit", help="Claim this unit (id or external_ref).")
LEASE = arg("--lease", type=int, help="Lease in seconds (default WL_LEASE_SECONDS).")


def exit_code(exc: WorkLedgerError) -> int:
    if isinstance(exc, NothingToClaim):
        return EXIT_NOTHING_TO_CLAIM
    if isinstance(exc, InvariantViolation):
        return EXIT_REFUSED
    if isinstance(exc, Unauthorized | Forbidden):
        return EXIT_AUTH
    if isinstance(exc, Unavailable):
        return EXIT_UNREACHABLE
    return EXIT_ERROR


NO_AGENT_TOKEN = (
    "no token: set WL_TOKEN to an agent's own token. On the server's host, `work-ledger "
    "token create --role agent --principal NAME` mints one (its last line is the token). "
    "Agent verbs, `run` and `mcp` never fall back to the operator token in WL_HOME."
)


def client_settings(*, operator: bool = False) -> tuple[str, str]:
    """WL_URL and WL_TOKEN. Only an operator verb (`operator=True`) falls back to the
    operator token `serve` stored in WL_HOME; without a token the verb stops, saying how
    to get one."""
    settings = load_settings()
    token = settings.token
    if token is None and operator:
        stored = Path(settings.home) / OPERATOR_TOKEN_FILE
        if stored.is_file():
            token = stored.read_text().strip() or None
    if token is None:
        print(NO_AGENT_TOKEN, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_AUTH)
    return settings.url, token


def make_client(*, operator: bool = False) -> Client:
    url, token = client_settings(operator=operator)
    return Client(url, token, agent=os.environ.get("WL_AGENT") or None)


@contextmanager
def handled(as_json: bool) -> Iterator[None]:
    """A ledger error becomes `code: detail` (or a JSON object) and its exit code."""
    try:
        yield
    except WorkLedgerError as exc:
        report_error(exc, as_json)
        raise SystemExit(exit_code(exc)) from None


def report_error(exc: WorkLedgerError, as_json: bool) -> None:
    if as_json:
        body = {
            "error": exc.code,
            "detail": exc.detail,
            "invariant": exc.invariant,
            "unit_id": exc.unit_id,
            "state": exc.state,
            "allowed": exc.allowed,
        }
        print(json.dumps(body), file=sys.stderr, flush=True)
        return
    from rich.markup import escape

    err_console.print(
        f"[red]{exc.code}[/red]: {escape(exc.detail)}", highlight=False, soft_wrap=True
    )
    if exc.invariant and exc.invariant not in exc.detail:
        err_console.print(
            f"  invariant: {exc.invariant}", markup=False, highlight=False, soft_wrap=True
        )
    if exc.allowed:
        err_console.print(
            f"  allowed next: {', '.join(exc.allowed)}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def emit_json(value: Any) -> None:
    print(json.dumps(to_json(value), sort_keys=True), flush=True)
