"""Agent and operator verbs over the HTTP API, through the SDK (WL_URL, WL_TOKEN, WL_AGENT).

Exit codes of every verb that talks to the server (scripts branch on them):

    0  done
    1  any other error (bad input, unknown unit, a bad row in a registered file)
    2  usage error (a missing or malformed argument; Typer's own)
    3  nothing to claim
    4  refused by a ledger invariant (409, including a lost claim: attempt_superseded)
    5  auth: missing, unknown or revoked token, or a role or holder that may not do this
    6  unreachable: the server cannot be reached, or its database is unavailable
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from work_ledger.cli.app import app, console, err_console
from work_ledger.client import Client, NothingToClaim, to_json
from work_ledger.client.models import Attempt, Question, Unit
from work_ledger.client.units_file import BadRow, Row, read_units
from work_ledger.config import load_settings
from work_ledger.errors import (
    Forbidden,
    InvalidInput,
    InvariantViolation,
    Unauthorized,
    Unavailable,
    WorkLedgerError,
)

# rich is imported where a verb draws, never at import: `show X --json` must not pay for it.
if TYPE_CHECKING:
    from rich.table import Table

EXIT_ERROR = 1
EXIT_NOTHING_TO_CLAIM = 3
EXIT_REFUSED = 4
EXIT_AUTH = 5
EXIT_UNREACHABLE = 6
OPERATOR_TOKEN_FILE = "operator.token"

JsonOption = typer.Option(False, "--json", help="Print JSON for scripts instead of tables.")


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
        err_console.print(NO_AGENT_TOKEN, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_AUTH)
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
        raise typer.Exit(exit_code(exc)) from None


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
        typer.echo(json.dumps(body), err=True)
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
    typer.echo(json.dumps(to_json(value), sort_keys=True))


def _row(table: Table, *cells: str) -> None:
    """Add a row whose cells are plain text (an external_ref like `a[1]` is not markup)."""
    from rich.text import Text

    table.add_row(*(Text(cell) for cell in cells))


def _when(value: Any) -> str:
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
        ("lease until", _when(unit.lease_expires_at)),
        ("attempts", str(unit.attempt_count)),
        ("cost", f"{unit.cost_cents} cents"),
        ("evidence", "\n".join(unit.evidence_urls)),
    ]
    if attempt is not None:
        rows.append(("attempt", f"{attempt.attempt_no} {attempt.id} ({attempt.outcome or 'live'})"))
    for key, value in rows:
        if value:
            _row(table, key, value)
    return table


def attempts_table(attempts: list[Attempt]) -> Table:
    from rich.table import Table

    table = Table(
        "no", "agent", "outcome", "cost", "started", "ended", "evidence", title="attempts"
    )
    for a in sorted(attempts, key=lambda a: a.attempt_no):
        _row(
            table,
            str(a.attempt_no),
            a.agent_id,
            a.outcome or "live",
            str(a.cost_cents),
            _when(a.started_at),
            _when(a.ended_at),
            a.evidence_url or "",
        )
    return table


def questions_table(questions: list[Question], title: str = "questions") -> Table:
    from rich.table import Table

    table = Table("id", "unit", "status", "question", "answer", "routed as", title=title)
    for q in questions:
        _row(table, q.id, q.unit_id, q.status, q.question, q.answer or "", q.external_task_id or "")
    return table


def print_unit(unit: Unit, attempt: Attempt | None = None) -> None:
    console.print(unit_table(unit, attempt))


# -- the verbs ---------------------------------------------------------------------------

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
            cells = [str(e.id), _when(e.created_at), e.event_type, move, e.agent_id or ""]
            cells.append(str(e.cost_delta_cents or ""))
            _row(table, *cells if unit else [e.unit_id, *cells])
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


FileArg = typer.Argument(..., exists=True, dir_okay=False, help="A CSV or JSONL file.")


@app.command()
def register(
    file: Path = FileArg,
    fleet: str | None = typer.Option(None, help="Fleet for rows that leave it out."),
    domain: str | None = typer.Option(None, help="Domain for rows that leave it out."),
    batch: int = typer.Option(1000, min=1, max=1000, help="Units per request (at most 1000)."),
    as_json: bool = JsonOption,
) -> None:
    """Register the units of a CSV or JSONL file; known ones count as existing. Idempotent."""
    rows = list(read_units(file, fleet=fleet, domain=domain))
    good = [r for r in rows if isinstance(r, Row)]
    bad = [r for r in rows if isinstance(r, BadRow)]
    created = existing = 0
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("registering"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=as_json or not err_console.is_terminal,
    )
    with handled(as_json), make_client(operator=True) as client, progress:
        task = progress.add_task("register", total=len(good))
        for at in range(0, len(good), batch):
            chunk = good[at : at + batch]
            try:
                done = client.register([r.unit for r in chunk])
            except InvalidInput as exc:
                bad.extend(_bad_batch(chunk, exc))
            else:
                created, existing = created + done.created, existing + done.existing
            progress.advance(task, len(chunk))
    bad.sort(key=lambda r: r.line)
    summary = {"created": created, "existing": existing, "bad": len(bad)}
    if as_json:
        emit_json({**summary, "bad_rows": [{"line": b.line, "error": b.error} for b in bad]})
    else:
        console.print(
            f"{file.name}: {created} created, {existing} existing, {len(bad)} bad row(s)",
            markup=False,
            highlight=False,
        )
        for b in bad:
            err_console.print(
                f"  line {b.line}: {b.error}", markup=False, highlight=False, soft_wrap=True
            )
    if bad:
        raise typer.Exit(EXIT_ERROR)


def _bad_batch(chunk: list[Row], exc: InvalidInput) -> list[BadRow]:
    """The rows a refused batch names (by `units[i]` in its errors), else the whole batch."""
    named: dict[int, str] = {}
    for error in exc.extra.get("errors") or []:
        loc = [p for p in error.get("loc", []) if isinstance(p, int)]
        if loc and 0 <= loc[0] < len(chunk):
            named[loc[0]] = f"refused by the server: {error.get('msg', exc.detail)}"
    if named:
        return [BadRow(chunk[i].line, why) for i, why in named.items()]
    return [BadRow(r.line, f"batch refused: {exc.code}: {exc.detail}") for r in chunk]
