"""Agent and operator verbs over the HTTP API, through the SDK (WL_URL, WL_TOKEN, WL_AGENT).

Exit codes: see `agent_client`; `register` lives in `register`.
"""

from __future__ import annotations

from work_ledger.cli.agent_client import (
    CLAIM_UNIT,
    JSON,
    LEASE,
    emit_json,
    handled,
    make_client,
)
from work_ledger.cli.console import console
from work_ledger.cli.tables import (
    add_plain_row,
    print_detail,
    print_unit,
    questions_table,
    timestamp,
)
from work_ledger.cli.verbs import Arg, arg, verb
from work_ledger.client import Client, NothingToClaim
from work_ledger.errors import InvariantViolation

UNIT = arg(
    "unit", envvar="WL_UNIT_ID", help="The unit: its id or external_ref (default $WL_UNIT_ID)."
)
ATTEMPT = arg(
    "--attempt",
    envvar="WL_ATTEMPT_ID",
    help="Fence the write to this attempt (default $WL_ATTEMPT_ID); a lost claim is refused.",
)
REASON = arg("--reason", help="Why, for the event log.")


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


@verb(
    arg("--domain", help="Claim only from this domain."),
    CLAIM_UNIT,
    LEASE,
    arg("--wait", type=int, help="Wait up to this many seconds (0..60)."),
    arg("--start", action="store_true", help="Also move it to in_progress."),
    JSON,
)
def claim(
    domain: str | None,
    unit: str | None,
    lease: int | None,
    wait: int | None,
    start: bool,
    as_json: bool,
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


@verb(UNIT, ATTEMPT, JSON)
def start(unit: str, attempt: str | None, as_json: bool) -> None:
    """Move a claimed unit to in_progress."""
    with handled(as_json), make_client() as client:
        step = client.start(unit, attempt_id=attempt)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@verb(UNIT, ATTEMPT, arg("--lease", type=int, help="Renew the lease for this many seconds."), JSON)
def heartbeat(unit: str, attempt: str | None, lease: int | None, as_json: bool) -> None:
    """Extend the lease of your live attempt on a unit."""
    with handled(as_json), make_client() as client:
        step = client.heartbeat(_live_attempt(client, unit, attempt), lease_seconds=lease)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@verb(
    UNIT,
    arg("question", help="The question a human must answer."),
    arg("--group", help="Assignee group (default agent-questions)."),
    ATTEMPT,
    JSON,
)
def block(unit: str, question: str, group: str | None, attempt: str | None, as_json: bool) -> None:
    """Block an in_progress unit with a question; its lease pauses until the answer."""
    with handled(as_json), make_client() as client:
        asked = client.block(unit, question, assignee_group_slug=group, attempt_id=attempt)
        if as_json:
            emit_json(asked)
            return
        print_unit(asked.unit)
        console.print(f"question {asked.question.id} is open", markup=False, highlight=False)


@verb(
    UNIT,
    arg("text", metavar="ANSWER", help="The answer to the open question."),
    arg("--question", help="The question id (default: the open one)."),
    JSON,
)
def answer(unit: str, text: str, question: str | None, as_json: bool) -> None:
    """Answer a blocked unit's open question; the unit goes back to in_progress."""
    with handled(as_json), make_client(operator=True) as client:
        asked = client.unblock(unit, text, question_id=question)
        emit_json(asked) if as_json else print_unit(asked.unit)


def _tokens(flag: str, what: str) -> Arg:
    return arg(flag, type=int, help=f"{what} tokens (a whole number >= 0).")


@verb(
    UNIT,
    arg("cents", type=int, help="Cents spent (a whole number >= 0; 0 with tokens only)."),
    arg("--model", help="The model the money went to (e.g. claude-opus-4-6)."),
    _tokens("--input-tokens", "Input"),
    _tokens("--output-tokens", "Output"),
    _tokens("--cache-read-tokens", "Cache-read input"),
    _tokens("--cache-write-tokens", "Cache-write (creation) input"),
    arg("--estimated", action="store_true", help="The cents are a list-price estimate."),
    ATTEMPT,
    JSON,
)
def cost(
    unit: str,
    cents: int,
    model: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read_tokens: int | None,
    cache_write_tokens: int | None,
    estimated: bool,
    attempt: str | None,
    as_json: bool,
) -> None:
    """Record cost against your attempt (default: the unit's latest attempt), by model and
    tokens if given. Money spent is recorded past a budget's cap too."""
    with handled(as_json), make_client() as client:
        step = client.record_cost(
            _live_attempt(client, unit, attempt, last=True),
            cents,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            estimated=estimated,
        )
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@verb(
    UNIT,
    arg("evidence_url", help="An http(s) link to the evidence."),
    arg("--reason", help="A short note for the event log."),
    ATTEMPT,
    JSON,
)
def verify(
    unit: str, evidence_url: str, reason: str | None, attempt: str | None, as_json: bool
) -> None:
    """Move an in_progress unit to verified with a link to the evidence."""
    with handled(as_json), make_client() as client:
        step = client.verify(unit, evidence_url, attempt_id=attempt, reason=reason)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@verb(
    UNIT,
    arg("disposition", help="MIGRATED, DROPPED, DEFERRED or DEAD."),
    arg("--evidence", help="An http(s) link to the evidence."),
    REASON,
    ATTEMPT,
    JSON,
)
def dispose(
    unit: str,
    disposition: str,
    evidence: str | None,
    reason: str | None,
    attempt: str | None,
    as_json: bool,
) -> None:
    """Close a unit for good: MIGRATED once verified, else DROPPED, DEFERRED or DEAD."""
    with handled(as_json), make_client() as client:
        done = client.dispose(
            unit, disposition.upper(), evidence_url=evidence, reason=reason, attempt_id=attempt
        )
        emit_json({"unit": done}) if as_json else print_unit(done)


@verb(
    UNIT,
    arg("--outcome", default="abandoned", help="How the attempt ends: abandoned or failed."),
    REASON,
    ATTEMPT,
    JSON,
)
def release(
    unit: str, outcome: str, reason: str | None, attempt: str | None, as_json: bool
) -> None:
    """Give a claimed or in_progress unit back (ready) for another attempt."""
    with handled(as_json), make_client() as client:
        step = client.release(unit, outcome=outcome, reason=reason, attempt_id=attempt)
        emit_json(step) if as_json else print_unit(step.unit, step.attempt)


@verb(UNIT, JSON)
def show(unit: str, as_json: bool) -> None:
    """Show a unit with what it waits on, its attempts and questions."""
    with handled(as_json), make_client(operator=True) as client:
        detail = client.get_unit(unit)
        emit_json(detail) if as_json else print_detail(detail)


@verb(
    arg("unit", default=None, help="Only this unit's events."),
    arg("--limit", type=int, default=20, help="How many (1..500), newest first."),
    arg("--cursor", help="Continue from a previous page."),
    JSON,
)
def events(unit: str | None, limit: int, cursor: str | None, as_json: bool) -> None:
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


@verb(
    arg("--status", default="open", help="open, answered or cancelled ('' for all)."),
    arg("--group", help="Only this assignee group."),
    arg("--limit", type=int, default=50, help="How many (1..500)."),
    arg("--wait", type=int, help="Wait up to this many seconds for one."),
    arg(
        "--unrouted",
        action="store_true",
        help="Only those not yet routed to the human queue (triage).",
    ),
    JSON,
)
def questions(
    status: str | None,
    group: str | None,
    limit: int,
    wait: int | None,
    unrouted: bool,
    as_json: bool,
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
