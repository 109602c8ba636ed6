"""Reconciliation (DESIGN §9): the ledger's units against an export of workflow executions.

Temporal stays the execution truth, so the two may drift (a lost event, a lease that
lapsed, a hand edit). This compares every unit that carries a workflow_id with the
export and lists each mismatch; it never changes the ledger (one read-only transaction).

The export is JSON (a list of executions, `{"executions": [...]}`, or one object per
line) or CSV with a header row. Each execution needs a workflow id, a status and a close
time (empty while running). Field names are matched loosely (`workflow_id`, `workflowId`,
`Workflow Id`, or a nested `execution.workflowId`); statuses too (`COMPLETED`,
`Completed`, `WORKFLOW_EXECUTION_STATUS_COMPLETED`, `canceled`). When a workflow has
several runs, the latest one counts (a running run, else the last to close).

What the ledger should show for each status (what the projection would have made it):

    running, continued_as_new   claimed, in_progress or blocked, held by temporal:<workflow_id>
    completed                   verified or done
    failed, timed_out           ready (released for another attempt) or abandoned
    cancelled, terminated       abandoned
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.domain.model import State
from work_ledger.errors import InvalidInput, NotFound

RUNNING = frozenset({State.CLAIMED, State.IN_PROGRESS, State.BLOCKED})
EXPECTED: dict[str, frozenset[State]] = {
    "running": RUNNING,
    "continued_as_new": RUNNING,
    "completed": frozenset({State.VERIFIED, State.DONE}),
    "failed": frozenset({State.READY, State.ABANDONED}),
    "timed_out": frozenset({State.READY, State.ABANDONED}),
    "cancelled": frozenset({State.ABANDONED}),
    "terminated": frozenset({State.ABANDONED}),
}
_STATUS_ALIASES = {
    "canceled": "cancelled",
    "timedout": "timed_out",
    "continuedasnew": "continued_as_new",
}
_FIELDS = {
    "workflow_id": ("workflowid", "executionworkflowid", "id"),
    "status": ("status", "executionstatus"),
    "close_time": ("closetime", "executionclosetime", "closedat", "endtime"),
}


@dataclass(frozen=True, slots=True)
class Execution:
    workflow_id: str
    status: str
    close_time: dt.datetime | None


@dataclass(frozen=True, slots=True)
class LedgerUnit:
    external_ref: str
    workflow_id: str
    state: State
    disposition: str | None
    disposed_at: dt.datetime | None
    claimed_by: str | None


@dataclass(frozen=True, slots=True)
class Mismatch:
    kind: str  # state_mismatch | unit_without_execution | execution_without_unit
    workflow_id: str
    external_ref: str | None
    message: str

    def line(self) -> str:
        return f"{self.kind}\t{self.external_ref or '-'}\t{self.message}"


# -- the export ------------------------------------------------------------------------


def load_executions(path: Path) -> list[Execution]:
    """Read a JSON or CSV export (by its first character, not its name)."""
    text = path.read_text(encoding="utf-8-sig")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        records = _json_records(stripped, path)
    else:
        records = list(csv.DictReader(io.StringIO(text)))
    return [_execution(r, f"{path.name} record {i + 1}") for i, r in enumerate(records)]


def _json_records(text: str, path: Path) -> list[Mapping[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise InvalidInput(
                f"{path.name} is neither JSON nor JSON lines ({exc}); export the executions "
                "as a JSON list or as CSV with a header row"
            ) from None
    if isinstance(data, dict):
        data = data.get("executions", [data])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InvalidInput(f"{path.name} must hold a list of execution objects")
    return data


def _flat(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = prefix + re.sub(r"[^a-z0-9]", "", str(key).lower())
        if isinstance(value, Mapping):
            flat.update(_flat(value, name))
        else:
            flat.setdefault(name, value)
    return flat


def _field(flat: Mapping[str, Any], name: str) -> Any:
    for alias in (re.sub(r"[^a-z0-9]", "", name), *_FIELDS[name]):
        if flat.get(alias) not in (None, ""):
            return flat[alias]
    return None


def _execution(record: Mapping[str, Any], where: str) -> Execution:
    flat = _flat(record)
    workflow_id, status = _field(flat, "workflow_id"), _field(flat, "status")
    if workflow_id is None or status is None:
        raise InvalidInput(
            f"{where} has no workflow_id or no status; each execution needs workflow_id, "
            "status and close_time (empty while running)"
        )
    return Execution(str(workflow_id), normalize_status(str(status), where), _time(flat, where))


def normalize_status(raw: str, where: str = "status") -> str:
    name = re.sub(r"[^a-z0-9]", "", raw.lower()).removeprefix("workflowexecutionstatus")
    name = _STATUS_ALIASES.get(name, name)
    if name not in EXPECTED:
        raise InvalidInput(
            f"{where}: unknown workflow status {raw!r}; expected one of {', '.join(EXPECTED)}"
        )
    return name


def _time(flat: Mapping[str, Any], where: str) -> dt.datetime | None:
    raw = _field(flat, "close_time")
    if raw is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{where}: close_time {raw!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def latest_runs(executions: Iterable[Execution]) -> dict[str, Execution]:
    """One execution per workflow: a running run, else the last to close."""
    never = dt.datetime.max.replace(tzinfo=dt.UTC)
    latest: dict[str, Execution] = {}
    for e in executions:
        seen = latest.get(e.workflow_id)
        if seen is None or (e.close_time or never) >= (seen.close_time or never):
            latest[e.workflow_id] = e
    return latest


# -- the comparison --------------------------------------------------------------------


def compare(
    units: Sequence[LedgerUnit],
    executions: Iterable[Execution],
    *,
    purged_before: dt.datetime | None = None,
) -> list[Mismatch]:
    """Every mismatch, units first (by workflow id), then executions without a unit.

    `purged_before`: a closed unit disposed before this moment is expected to be gone from
    the export (Temporal's retention), so its missing execution is not a mismatch.
    """
    latest = latest_runs(executions)
    found: list[Mismatch] = []
    for unit in units:
        execution = latest.get(unit.workflow_id)
        if execution is None:
            purged = purged_before is not None and (
                unit.disposed_at is not None and unit.disposed_at < purged_before
            )
            if not purged:
                found.append(_missing(unit))
            continue
        mismatch = _check(unit, execution)
        if mismatch is not None:
            found.append(mismatch)
    known = {u.workflow_id for u in units}
    for workflow_id, execution in sorted(latest.items()):
        if workflow_id not in known:
            found.append(
                Mismatch(
                    "execution_without_unit",
                    workflow_id,
                    None,
                    f"workflow {workflow_id} is {execution.status}{_closed(execution)}, but no "
                    "unit carries this workflow_id; register the unit with it",
                )
            )
    return found


def _missing(unit: LedgerUnit) -> Mismatch:
    return Mismatch(
        "unit_without_execution",
        unit.workflow_id,
        unit.external_ref,
        f"workflow {unit.workflow_id}: the ledger has the unit {_ledger(unit)}, but the "
        "export has no execution of this workflow (not started, purged, or the wrong "
        "namespace)",
    )


def _check(unit: LedgerUnit, execution: Execution) -> Mismatch | None:
    expected = EXPECTED[execution.status]
    agent = f"temporal:{unit.workflow_id}"
    if unit.state in expected and (expected is not RUNNING or unit.claimed_by == agent):
        return None
    wanted = " or ".join(sorted(expected))
    if expected is RUNNING:
        wanted += f", held by {agent}"
    return Mismatch(
        "state_mismatch",
        unit.workflow_id,
        unit.external_ref,
        f"workflow {unit.workflow_id} is {execution.status}{_closed(execution)}, but the "
        f"ledger has the unit {_ledger(unit)}; expected {wanted}",
    )


def _ledger(unit: LedgerUnit) -> str:
    text = str(unit.state)
    if unit.disposition:
        text += f" {unit.disposition}"
    if unit.claimed_by:
        text += f" (held by {unit.claimed_by})"
    return text


def _closed(execution: Execution) -> str:
    if execution.close_time is None:
        return ""
    return f" (closed {execution.close_time.strftime('%Y-%m-%dT%H:%M:%SZ')})"


# -- the ledger side (read-only) -------------------------------------------------------


async def read_units(database_url: str) -> list[LedgerUnit]:
    """Every unit with a workflow_id, read in a READ ONLY transaction."""
    conn = await connect(database_url)
    try:
        async with translated_errors(), conn.transaction(readonly=True):
            rows = await conn.fetch(QUERIES["reconcile_units"])
    except asyncpg.UndefinedTableError:
        raise NotFound(
            "this database holds no ledger (no work_units table); point WL_DATABASE_URL at "
            "the ledger's database, or run `work-ledger migrate` first"
        ) from None
    finally:
        await conn.close()
    return [
        LedgerUnit(
            r["external_ref"],
            r["workflow_id"],
            State(r["state"]),
            r["disposition"],
            r["disposed_at"],
            r["claimed_by"],
        )
        for r in rows
    ]
