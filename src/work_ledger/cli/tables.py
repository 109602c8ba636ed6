"""Units, attempts and questions as terminal tables (cells are plain text, never markup)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from work_ledger.cli.console import console
from work_ledger.client.flow import Control
from work_ledger.client.models import Attempt, Question, Unit, UnitDetail, UnitRef
from work_ledger.client.money import Budget

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


def _ref(unit: UnitRef) -> str:
    state = " ".join(s for s in (unit.state, unit.disposition) if s)
    return f"{unit.external_ref} ({state})" if state else unit.external_ref


def shape_rows(detail: UnitDetail) -> list[tuple[str, str]]:
    """What a unit waits on, its prerequisites, its place in a split, its attempt limit."""
    unit = detail.unit
    asked = {q.id: q.question for q in detail.questions}
    waits = [
        w.describe() + (f": {asked[w.question_id]}" if w.question_id in asked else "")
        for w in detail.waiting_on
    ]
    rows = [
        ("waits on", "\n".join(waits)),
        ("requires", "\n".join(_ref(r) for r in detail.requires)),
        ("split from", _ref(detail.parent) if detail.parent else ""),
        ("children", "\n".join(_ref(c) for c in detail.children)),
        ("exclusive", ", ".join(unit.exclusive)),
        ("held back by", "\n".join(held_back_text(h) for h in detail.held_back_by)),
    ]
    if detail.children and detail.subtree_cost_cents is not None:
        rows.append(("subtree cost", f"{detail.subtree_cost_cents} cents"))
    if unit.attempts_allowed is not None:
        rows.append(
            (
                "attempts allowed",
                f"{unit.failed_attempts or 0} failed of {unit.attempts_allowed} allowed "
                f"(max_attempts {unit.max_attempts})",
            )
        )
    return [(key, value) for key, value in rows if value]


def held_back_text(reason: dict[str, Any]) -> str:
    """One reason a ready unit is not claimed now (DESIGN §13), in a line."""
    scope = f"fleet {reason.get('fleet')}" + (
        f" domain {reason['domain']}" if reason.get("domain") else ""
    )
    kind = reason.get("kind")
    if kind == "paused":
        return f"{scope} is paused ({reason.get('reason') or 'no reason given'})"
    if kind == "cap":
        return f"{scope} is at its cap ({reason.get('live')} live of {reason.get('max_live')})"
    if kind == "budget":
        return (
            f"the budget of {scope} is spent ({reason.get('spent_cents')} of "
            f"{reason.get('cap_cents')} cents)"
        )
    if kind == "exclusive":
        other = reason.get("unit") or {}
        return (
            f"key {reason.get('key')!r} is held by {other.get('external_ref')} "
            f"({other.get('state')})"
        )
    return str(reason)


def print_detail(detail: UnitDetail) -> None:
    """A unit as `show` prints it: the unit, what holds it, its attempts and questions."""
    table = unit_table(detail.unit)
    for key, value in shape_rows(detail):
        add_plain_row(table, key, value)
    console.print(table)
    if detail.attempts:
        console.print(attempts_table(detail.attempts))
        if any(a.cost_by_model for a in detail.attempts):
            console.print(cost_by_model_table(detail.attempts))
    if detail.questions:
        console.print(questions_table(detail.questions))


def cost_by_model_table(attempts: list[Attempt]) -> Table:
    from rich.table import Table

    table = Table(
        "attempt", "model", "cents", "estimated", "input", "output", "cache read",
        "cache write", title="cost by model",
    )  # fmt: skip
    for a in sorted(attempts, key=lambda a: a.attempt_no):
        for m in a.cost_by_model:
            counts = (m.input_tokens, m.output_tokens, m.cache_read_tokens, m.cache_write_tokens)
            add_plain_row(
                table,
                str(a.attempt_no),
                m.model or "(none)",
                str(m.cost_cents),
                str(m.estimated_cents),
                *(str(n) for n in counts),
            )
    return table


def budgets_table(budgets: list[Budget]) -> Table:
    from rich.table import Table

    table = Table("fleet", "domain", "spent", "cap", "remaining", "used", title="budgets")
    for b in budgets:
        used = b.used_percent
        add_plain_row(
            table,
            b.fleet,
            b.domain or "(whole fleet)",
            str(b.spent_cents),
            str(b.cap_cents),
            str(b.remaining_cents),
            ("exhausted" if b.exhausted else "") if used is None else f"{used:.0f} %",
        )
    return table


def controls_table(controls: list[Control]) -> Table:
    from rich.table import Table

    table = Table(
        "scope", "live / cap", "held", "paused since", "drained", "gate", title="controls"
    )
    for c in controls:
        cap = "-" if c.max_live is None else str(c.max_live)
        gate = (
            "-"
            if not c.gate
            else f"<= {c.gate.get('max_failed_share')} failed of last {c.gate.get('last_attempts')}"
        )
        add_plain_row(
            table,
            c.scope if c.domain else f"{c.fleet} (whole fleet)",
            f"{c.live} / {cap}",
            str(c.held),
            "-" if c.paused_since is None else c.paused_since.strftime("%Y-%m-%d %H:%M UTC"),
            "yes" if c.drained else ("no" if c.paused else "-"),
            gate,
        )
    return table
