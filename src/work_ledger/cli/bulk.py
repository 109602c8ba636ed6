"""`bulk dispose|release --fleet F [filters] --reason R [--apply]`: change many units at once.

A dry run by default: it prints what would change (and what would be skipped, with the
rule) and changes nothing; `--apply` sends the same request for real, in one transaction.
Operator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from work_ledger.cli.agent_client import JSON, emit_json, handled, make_client
from work_ledger.cli.console import console
from work_ledger.cli.verbs import arg, verb
from work_ledger.client.models import BulkResult

if TYPE_CHECKING:
    from rich.table import Table

STATES = ("ready", "waiting", "claimed", "in_progress", "blocked", "verified", "done", "abandoned")
DISPOSITIONS = ("MIGRATED", "DROPPED", "DEFERRED", "DEAD")


@verb(
    arg("action", choices=("dispose", "release"), help="dispose (with --disposition) or release."),
    arg("--fleet", required=True, help="The fleet whose units change (required)."),
    arg("--domain", help="Only this domain of the fleet."),
    arg(
        "--state",
        dest="states",
        action="append",
        choices=STATES,
        help="Only units in this state (repeat for several).",
    ),
    arg("--prefix", help="Only units whose external_ref starts with this (no wildcards)."),
    arg("--held-by", help="Only units this agent holds."),
    arg("--disposition", choices=DISPOSITIONS, help="dispose: the disposition."),
    arg("--reason", required=True, help="Why; every event of the run records it (required)."),
    arg("--limit", type=int, help="At most this many units may match (default 1000, max 10000)."),
    arg("--apply", action="store_true", help="Do it (default: a dry run that changes nothing)."),
    JSON,
)
def bulk(
    action: str,
    fleet: str,
    domain: str | None,
    states: list[str] | None,
    prefix: str | None,
    held_by: str | None,
    disposition: str | None,
    reason: str,
    limit: int | None,
    apply: bool,
    as_json: bool,
) -> None:
    """Dispose or release every unit of a fleet the filters match. A dry run unless
    --apply: prints what would change and what would be skipped (with the rule), and
    changes nothing. With --apply, all of it changes in one transaction, or nothing.
    Operator."""
    with handled(as_json), make_client(operator=True) as client:
        result = client.bulk(
            action,
            fleet,
            reason=reason,
            disposition=disposition,
            domain=domain,
            states=states,
            external_ref_prefix=prefix,
            held_by=held_by,
            dry_run=not apply,
            limit=limit,
        )
    if as_json:
        emit_json(result)
        return
    console.print(bulk_table(result, disposition))
    console.print(summary(result, action), markup=False, highlight=False, soft_wrap=True)


def summary(result: BulkResult, action: str) -> str:
    changed, skipped = len(result.changed), len(result.skipped)
    if result.dry_run:
        return (
            f"dry run: {result.matched} matched, {changed} would change, {skipped} skipped; "
            f"nothing changed. Add --apply to {action} them."
        )
    return (
        f"{result.matched} matched, {changed} changed, {skipped} skipped "
        f"(operation {result.operation_id})."
    )


def bulk_table(result: BulkResult, disposition: str | None = None) -> Table:
    from rich.table import Table

    from work_ledger.cli.tables import add_plain_row

    title = "would change (dry run)" if result.dry_run else "changed"
    table = Table("unit", "from", "to", "why skipped", title=title)
    for c in result.changed:
        to = c.to_state if disposition is None else f"{c.to_state} {disposition}"
        add_plain_row(table, c.external_ref, c.from_state, to, "")
    for s in result.skipped:
        add_plain_row(table, s.external_ref, s.state, "(skipped)", s.reason)
    return table
