"""Agent and operator verbs over the HTTP API, through the SDK (WL_URL, WL_TOKEN, WL_AGENT).

Exit codes: see `agent_client`; `register` lives in `register`.
"""

from __future__ import annotations

import typer

from work_ledger.cli.agent_client import JsonOption, emit_json, handled, make_client
from work_ledger.cli.app import app, console
from work_ledger.cli.tables import (
    add_plain_row,
    attempts_table,
    print_unit,
    questions_table,
    timestamp,
)
from work_ledger.client import Client, NothingToClaim
from work_ledger.errors import InvariantViolation

UnitArg = typer.Argument(
    ..., envvar="WL_UNIT_ID", help="The unit: its id or external_ref (default $WL_UNIT_ID)."
)
AttemptOption = typer.Option(
    None,
    "--attempt",
    envvar="WL_ATTEMPT_ID",
    help="Fence the write to this attempt (default $WL_ATTEMPT_ID); a lost claim is refused.",
)


def _live_attempt(client: Client, unit: str, attempt: str | None, *, last: bool = False) -> str:
    """The attempt to write against: the one given, else the unit's live (or last) one."""
    if attempt:
        return attempt
    detail = client.get_unit(unit)
    found = detail.last_attempt if last else detail.live_attempt
    if found is None:
        raise InvariantViolation(
            f"unit {detail.unit.external_ref} is {detail.unit.state} and has no "
            + ("attempt" if last else "live attempt")
            + "; claim it first",
            invariant="attempt_superseded" if not last else None,
            unit_id=detail.unit.id,
            state=detail.unit.state,
        )
    return found.id


@app.command()
def claim(
    domain: str | None = typer.Option(None, help="Claim only from this domain."),
    unit: str | None = typer.Option(None, "--unit", help="Claim this unit (id or external_ref)."),
    lease: int | None = typer.Option(None, help="Lease in seconds (default WL_LEASE_SECONDS)."),
    wait: int | None = typer.Option(None, help="Wait up to this many seconds (0..60)."),
    start: bool = typer.Option(False, "--start", help="Also move it to in_progress."),
    as_json: bool = JsonOption,
) -> None:
    """Claim the next claimable unit (or --unit REF). Exit 3 when nothing is claimable."""
    with handled(as_json), make_client() as client:
        if unit is not None:
            got = client.claim_unit(unit, lease_seconds=lease)
        else:
            got = client.claim_next(domain=domain, lease_seconds=lease, wait_seconds=wait)
        if got.unit is None or got.attempt is None:
            raise NothingToClaim("no unit is claimable right now; try again later or use --wait")
        if start and got.unit.state == "claimed":
            step = client.start(got.unit.id, attempt_id=got.attempt.id)
            got = type(got)(step.unit, step.attempt, got.resumed)
        if as_json:
            emit_json(got)
            return
        assert got.unit is not None
        console.print("resumed your live claim" if got.resumed else "claimed", style="green")
        print_unit(got.unit, got.attempt)


@app.command()
def start(
    unit: str = UnitArg, attempt: str | None = AttemptOption, as_json: bool = JsonOption
) -> None:
    """Move a claimed unit to in_progress."""
    with handled(as_json), make_client() as client:
        step = client.start(unit, attempt_id=attempt)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@app.command()
def heartbeat(
    unit: str = UnitArg,
    attempt: str | None = AttemptOption,
    lease: int | None = typer.Option(None, help="Renew the lease for this many seconds."),
    as_json: bool = JsonOption,
) -> None:
    """Extend the lease of your live attempt on a unit."""
    with handled(as_json), make_client() as client:
        step = client.heartbeat(_live_attempt(client, unit, attempt), lease_seconds=lease)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@app.command()
def block(
    unit: str = UnitArg,
    question: str = typer.Argument(..., help="The question a human must answer."),
    group: str | None = typer.Option(None, help="Assignee group (default agent-questions)."),
    attempt: str | None = AttemptOption,
    as_json: bool = JsonOption,
) -> None:
    """Block an in_progress unit with a question; its lease pauses until the answer."""
    with handled(as_json), make_client() as client:
        asked = client.block(unit, question, assignee_group_slug=group, attempt_id=attempt)
        if as_json:
            emit_json(asked)
            return
        print_unit(asked.unit)
        console.print(f"question {asked.question.id} is open", markup=False, highlight=False)


@app.command()
def answer(
    unit: str = UnitArg,
    text: str = typer.Argument(..., metavar="ANSWER", help="The answer to the open question."),
    question: str | None = typer.Option(None, help="The question id (default: the open one)."),
    as_json: bool = JsonOption,
) -> None:
    """Answer a blocked unit's open question; the unit goes back to in_progress."""
    with handled(as_json), make_client(operator=True) as client:
        asked = client.unblock(unit, text, question_id=question)
        emit_json(asked) if as_json else print_unit(asked.unit)


@app.command()
def cost(
    unit: str = UnitArg,
    cents: int = typer.Argument(..., help="Cents spent (a positive whole number)."),
    attempt: str | None = AttemptOption,
    as_json: bool = JsonOption,
) -> None:
    """Record cost against your attempt (default: the unit's latest attempt)."""
    with handled(as_json), make_client() as client:
        step = client.record_cost(_live_attempt(client, unit, attempt, last=True), cents)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@app.command()
def verify(
    unit: str = UnitArg,
    evidence_url: str = typer.Argument(..., help="An http(s) link to the evidence."),
    reason: str | None = typer.Option(None, help="A short note for the event log."),
    attempt: str | None = AttemptOption,
    as_json: bool = JsonOption,
) -> None:
    """Move an in_progress unit to verified with a link to the evidence."""
    with handled(as_json), make_client() as client:
        step = client.verify(unit, evidence_url, attempt_id=attempt, reason=reason)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@app.command()
def dispose(
    unit: str = UnitArg,
    disposition: str = typer.Argument(..., help="MIGRATED, DROPPED, DEFERRED or DEAD."),
    evidence: str | None = typer.Option(None, help="An http(s) link to the evidence."),
    reason: str | None = typer.Option(None, help="Why, for the event log."),
    attempt: str | None = AttemptOption,
    as_json: bool = JsonOption,
) -> None:
    """Close a unit for good: MIGRATED once verified, else DROPPED, DEFERRED or DEAD."""
    with handled(as_json), make_client() as client:
        done = client.dispose(
            unit, disposition.upper(), evidence_url=evidence, reason=reason, attempt_id=attempt
        )
        emit_json({"unit": done}) if as_json else print_unit(done)


@app.command()
def release(
    unit: str = UnitArg,
    outcome: str = typer.Option("abandoned", help="How the attempt ends: abandoned or failed."),
    reason: str | None = typer.Option(None, help="Why, for the event log."),
    attempt: str | None = AttemptOption,
    as_json: bool = JsonOption,
) -> None:
    """Give a claimed or in_progress unit back (ready) for another attempt."""
    with handled(as_json), make_client() as client:
        step = client.release(unit, outcome=outcome, reason=reason, attempt_id=attempt)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@app.command()
def show(unit: str = UnitArg, as_json: bool = JsonOption) -> None:
    """Show a unit with its attempts and questions."""
    with handled(as_json), make_client(operator=True) as client:
        detail = client.get_unit(unit)
        if as_json:
            emit_json(detail)
            return
        print_unit(detail.unit)
        if detail.attempts:
            console.print(attempts_table(detail.attempts))
        if detail.questions:
            console.print(questions_table(detail.questions))


@app.command()
def events(
    unit: str | None = typer.Argument(None, help="Only this unit's events."),
    limit: int = typer.Option(20, help="How many (1..500), newest first."),
    cursor: str | None = typer.Option(None, help="Continue from a previous page."),
    as_json: bool = JsonOption,
) -> None:
    """The event log, newest first (of one unit, or of the whole ledger)."""
    with handled(as_json), make_client(operator=True) as client:
        page = client.list_events(unit, limit=limit, cursor=cursor)
        if as_json:
            emit_json(page)
            return
        from rich.table import Table

        columns = ["id", "at", "event", "from → to", "agent", "cost"]
        table = Table(*columns if unit else ["unit", *columns], title="events")
        for e in page.items:
            move = f"{e.from_state or ''} → {e.to_state or ''}" if e.to_state else ""
            cells = [str(e.id), timestamp(e.created_at), e.event_type, move, e.agent_id or ""]
            cells.append(str(e.cost_delta_cents or ""))
            add_plain_row(table, *cells if unit else [e.unit_id, *cells])
        console.print(table)
        if page.next_cursor:
            console.print(f"more: --cursor {page.next_cursor}", highlight=False)


@app.command()
def questions(
    status: str | None = typer.Option("open", help="open, answered or cancelled ('' for all)."),
    group: str | None = typer.Option(None, help="Only this assignee group."),
    limit: int = typer.Option(50, help="How many (1..500)."),
    wait: int | None = typer.Option(None, help="Wait up to this many seconds for one."),
    unrouted: bool = typer.Option(
        False, "--unrouted", help="Only those not yet routed to the human queue (triage)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """List blocking questions (open ones by default)."""
    with handled(as_json), make_client(operator=True) as client:
        page = client.list_questions(
            status=status or None,
            assignee_group_slug=group,
            routed=False if unrouted else None,
            limit=limit,
            wait_seconds=wait,
        )
        emit_json(page) if as_json else console.print(questions_table(page.items))
