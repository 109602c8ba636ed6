"""`work-ledger register FILE`: every row of the file ends up registered or named bad.

Rows the file itself gets wrong are named by `units_file`. The server may refuse a batch
for a row only it can judge (a NUL byte, say); then the rows it names are bad, and the
rest of the batch is sent again without them. A batch refused without naming a row is
split in halves until the refused row stands alone. Registering is idempotent, so a
batch sent again never registers a unit twice.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from work_ledger.cli.agent_client import (
    EXIT_ERROR,
    JSON,
    emit_json,
    exit_code,
    make_client,
    report_error,
)
from work_ledger.cli.console import console, err_console
from work_ledger.cli.verbs import arg, verb
from work_ledger.client.models import NewUnit, Registration
from work_ledger.client.units_file import BadRow, Row, read_units
from work_ledger.errors import InvalidInput, WorkLedgerError

Register = Callable[[list[NewUnit]], Registration]
MAX_BATCH = 1000  # units per request the API takes
GIVE_FILE = "give the path of a CSV or JSONL file"


@dataclass
class Tally:
    created: int = 0
    existing: int = 0
    bad: list[BadRow] = field(default_factory=list)
    # From the batch the server could not take on (unreachable, auth): perhaps registered,
    # not confirmed.
    unconfirmed: list[Row] = field(default_factory=list)


def _existing_file(name: str) -> Path:
    path = Path(name)
    if not path.exists():
        raise ArgumentTypeError(f"file {name!r} does not exist; {GIVE_FILE}")
    if path.is_dir():
        raise ArgumentTypeError(f"{name!r} is a directory; {GIVE_FILE}")
    return path


def _batch_size(raw: str) -> int:
    try:
        size = int(raw)
    except ValueError:
        raise ArgumentTypeError(f"{raw!r} is not a whole number") from None
    if not 1 <= size <= MAX_BATCH:
        raise ArgumentTypeError(f"{size} is not in the range 1..{MAX_BATCH}")
    return size


@verb(
    arg("file", type=_existing_file, help="A CSV or JSONL file."),
    arg("--fleet", help="Fleet for rows that leave it out."),
    arg("--domain", help="Domain for rows that leave it out."),
    arg(
        "--batch",
        type=_batch_size,
        default=MAX_BATCH,
        help=f"Units per request (at most {MAX_BATCH}).",
    ),
    JSON,
)
def register(file: Path, fleet: str | None, domain: str | None, batch: int, as_json: bool) -> None:
    """Register the units of a CSV or JSONL file; known ones count as existing. Idempotent."""
    rows = list(read_units(file, fleet=fleet, domain=domain))
    good = [r for r in rows if isinstance(r, Row)]
    tally = Tally(bad=[r for r in rows if isinstance(r, BadRow)])
    stopped = _send_all(good, batch, tally, quiet=as_json)
    _report(file, tally, as_json)
    if stopped is not None:
        report_error(stopped, as_json)
        raise SystemExit(exit_code(stopped))
    if tally.bad:
        raise SystemExit(EXIT_ERROR)


def _send_all(good: list[Row], batch: int, tally: Tally, *, quiet: bool) -> WorkLedgerError | None:
    """Send the rows in batches; the error that stopped it (`tally.unconfirmed` is the rest)."""
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
        disable=quiet or not err_console.is_terminal,
    )
    at = 0
    try:
        with make_client(operator=True) as client, progress:
            task = progress.add_task("register", total=len(good))
            for at in range(0, len(good), batch):
                send_batch(client.register, good[at : at + batch], tally)
                progress.advance(task, len(good[at : at + batch]))
    except WorkLedgerError as exc:
        tally.unconfirmed = good[at:]
        return exc
    return None


def send_batch(register: Register, chunk: list[Row], tally: Tally) -> None:
    """Register `chunk`, leaving out (as bad) each row the server refuses."""
    pending = [chunk]
    while pending:
        rows = pending.pop()
        try:
            done = register([r.unit for r in rows])
        except InvalidInput as exc:
            named = _named_rows(rows, exc)
            if named:
                tally.bad += [BadRow(rows[i].line, why) for i, why in named.items()]
                rest = [r for i, r in enumerate(rows) if i not in named]
                pending += [rest] if rest else []
            elif len(rows) == 1:
                why = f"refused by the server: {exc.code}: {exc.detail}"
                tally.bad.append(BadRow(rows[0].line, why))
            else:
                half = len(rows) // 2
                pending += [rows[half:], rows[:half]]
        else:
            tally.created, tally.existing = (
                tally.created + done.created,
                tally.existing + done.existing,
            )


def _named_rows(rows: list[Row], exc: InvalidInput) -> dict[int, str]:
    """The rows of a refused batch that its errors name (by `units[i]`), with the reason;
    or, refused for their prerequisites, the rows requiring an unknown ref (named in
    `unknown`) or making a cycle (its refs in `units`)."""
    named: dict[int, str] = {}
    for error in exc.extra.get("errors") or []:
        loc = [p for p in error.get("loc", []) if isinstance(p, int)]
        if loc and 0 <= loc[0] < len(rows):
            named[loc[0]] = f"refused by the server: {error.get('msg', exc.detail)}"
    unknown, cycle = set(exc.extra.get("unknown") or ()), set(exc.extra.get("units") or ())
    for i, row in enumerate(rows):
        if unknown & set(row.unit.requires) or (
            exc.invariant == "prerequisite_cycle" and row.unit.external_ref in cycle
        ):
            named[i] = f"refused by the server: {exc.code}: {exc.detail}"
    return named


def _report(file: Path, tally: Tally, as_json: bool) -> None:
    bad = sorted(tally.bad, key=lambda r: r.line)
    left = tally.unconfirmed
    summary = {
        "created": tally.created,
        "existing": tally.existing,
        "bad": len(bad),
        "unconfirmed": len(left),
    }
    if as_json:
        rows = [{"line": b.line, "error": b.error} for b in bad]
        first = {"first_unconfirmed_line": left[0].line} if left else {}
        emit_json({**summary, "bad_rows": rows, **first})
        return
    console.print(
        f"{file.name}: {tally.created} created, {tally.existing} existing, {len(bad)} bad row(s)"
        + (f", {len(left)} unconfirmed" if left else ""),
        markup=False,
        highlight=False,
    )
    for b in bad:
        err_console.print(
            f"  line {b.line}: {b.error}", markup=False, highlight=False, soft_wrap=True
        )
    if left:
        err_console.print(
            f"  from line {left[0].line} on, rows were not confirmed: run the same command "
            "again once the server answers (registering is idempotent)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
