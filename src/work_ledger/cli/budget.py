"""`budget set FLEET CAP_CENTS [--domain D]` and `budget list`: the fleet's caps (DESIGN §12).

Once a scope's units have spent its cap, nothing in it is claimed anew; what is held goes
on, and money spent is still recorded.
"""

from __future__ import annotations

import sys

from work_ledger.cli.agent_client import JSON, emit_json, handled, make_client
from work_ledger.cli.console import console
from work_ledger.cli.tables import budgets_table
from work_ledger.cli.verbs import arg, verb

USAGE = "usage: work-ledger budget set FLEET CAP_CENTS [--domain D] | work-ledger budget list"


@verb(
    arg("action", choices=("set", "list"), help="set a cap, or list every budget."),
    arg("fleet", default=None, help="set: the fleet."),
    arg("cap_cents", type=int, default=None, help="set: the cap in cents (>= 0)."),
    arg("--domain", help="set: cap only this domain of the fleet."),
    JSON,
)
def budget(
    action: str, fleet: str | None, cap_cents: int | None, domain: str | None, as_json: bool
) -> None:
    """Set a fleet's (or one domain's) budget cap in cents, or list every budget with what
    it spent, its cap, what remains and the share used. Operator (or triage, reader to list)."""
    with handled(as_json), make_client(operator=True) as client:
        if action == "list":
            found = client.budgets()
        elif fleet is None or cap_cents is None:
            print(f"budget set needs FLEET and CAP_CENTS\n{USAGE}", file=sys.stderr)
            raise SystemExit(2)
        else:
            found = [client.set_budget(fleet, cap_cents, domain=domain)]
        if as_json:
            emit_json(found[0] if action == "set" else {"items": found})
        else:
            console.print(budgets_table(found))
