"""Units, attempts and questions as terminal tables (cells are plain text, never markup)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from work_ledger.cli.console import console
from work_ledger.client.models import Attempt, Question, Unit

# rich is imported when a table is drawn, never at import: `show X --json` must not pay for it.
if TYPE_CHECKING:
    from rich.table import Table


def add_plain_row(table: Table, *cells: str) -> None:
    """Add a row whose cells are plain text (an external_ref like `a[1]` is not markup)."""
    from rich.text import Text

    table.add_row(*(Text(cell) for cell in cells))


def timestamp(value: Any) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def unit_table(unit: Unit, attempt: Attempt | None = None) -> Table:
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("unit", unit.external_ref),
        ("id", unit.id),
        ("state", unit.state + (f" ({unit.disposition})" if unit.disposition else "")),
        ("fleet / domain", f"{unit.fleet} / {unit.domain}"),
        ("held by", unit.claimed_by or ""),
        ("lease until", timestamp(unit.lease_expires_at)),
        ("attempts", str(unit.attempt_count)),
        ("cost", f"{unit.cost_cents} cents"),
        ("evidence", "\n".join(unit.evidence_urls)),
    ]
    if attempt is not None:
        rows.append(("attempt", f"{attempt.attempt_no} {attempt.id} ({attempt.outcome or 'live'})"))
    for key, value in rows:
        if value:
            add_plain_row(table, key, value)
    return table


def attempts_table(attempts: list[Attempt]) -> Table:
    from rich.table import Table

    table = Table(
        "no", "agent", "outcome", "cost", "started", "ended", "evidence", title="attempts"
    )
    for a in sorted(attempts, key=lambda a: a.attempt_no):
        add_plain_row(
            table,
            str(a.attempt_no),
            a.agent_id,
            a.outcome or "live",
            str(a.cost_cents),
            timestamp(a.started_at),
            timestamp(a.ended_at),
            a.evidence_url or "",
        )
    return table


def questions_table(questions: list[Question], title: str = "questions") -> Table:
    from rich.table import Table

    table = Table("id", "unit", "status", "question", "answer", "routed as", title=title)
    for q in questions:
        add_plain_row(
            table, q.id, q.unit_id, q.status, q.question, q.answer or "", q.external_task_id or ""
        )
    return table


def print_unit(unit: Unit, attempt: Attempt | None = None) -> None:
    console.print(unit_table(unit, attempt))
