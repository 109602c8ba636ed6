"""`work-ledger reconcile`: every kind of mismatch, a clean export, and a read-only ledger."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from support.projection_streams import OPERATOR, Stream, register_workflows
from work_ledger.domain.model import Disposition, State
from work_ledger.errors import InvalidInput
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.ingest import EventOutcome, Projector
from work_ledger.temporal.reconcile import (
    Execution,
    LedgerUnit,
    compare,
    latest_runs,
    load_executions,
    normalize_status,
)

CLOSED = "2026-01-05T10:00:00Z"


async def _run_cli(database_url: str, home: Path, export: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "work-ledger"), "reconcile", str(export)]
    env = os.environ | {"WL_DATABASE_URL": database_url, "WL_HOME": str(home)}
    return await asyncio.to_thread(
        subprocess.run, command, env=env, cwd=home, capture_output=True, text=True, timeout=60
    )


async def _photo(raw: asyncpg.Connection) -> tuple[object, ...]:
    row = await raw.fetchrow(
        "SELECT (SELECT array_agg(u::text ORDER BY u.id) FROM work_units AS u), "
        "(SELECT count(*) FROM work_unit_events), (SELECT count(*) FROM work_unit_attempts)"
    )
    assert row is not None
    return tuple(row)


async def _project(projector: Projector, *streams: Stream) -> None:
    report = await projector.project([e for s in streams for e in s.events])
    assert report.count(EventOutcome.APPLIED) == sum(len(s.events) for s in streams)


async def test_reconcile_reports_each_kind_of_mismatch_and_changes_nothing(
    ledger: Ledger,
    projector: Projector,
    raw: asyncpg.Connection,
    database_url: str,
    tmp_path: Path,
) -> None:
    """A crafted export: one line per mismatch kind, exit 1, the ledger untouched."""
    await register_workflows(ledger, "wf-ok", "wf-behind", "wf-missing", "wf-taken")
    await _project(projector, Stream("wf-ok").run("completed"), Stream("wf-missing").run())
    await ledger.claim_named("unit-wf-taken", "agent-7")
    export = tmp_path / "executions.json"
    export.write_text(
        json.dumps(
            [
                {"workflow_id": "wf-ok", "status": "COMPLETED", "close_time": CLOSED},
                {"workflow_id": "wf-behind", "status": "Completed", "close_time": CLOSED},
                {"workflow_id": "wf-taken", "status": "Running", "close_time": None},
                {"workflow_id": "wf-orphan", "status": "Failed", "close_time": CLOSED},
            ]
        )
    )
    before = await _photo(raw)
    result = await _run_cli(database_url, tmp_path, export)
    lines = sorted(result.stdout.splitlines())
    assert result.returncode == 1, result.stderr
    assert [line.split("\t")[:2] for line in lines] == [
        ["execution_without_unit", "-"],
        ["state_mismatch", "unit-wf-behind"],
        ["state_mismatch", "unit-wf-taken"],
        ["unit_without_execution", "unit-wf-missing"],
    ]
    assert "ready" in lines[1]
    assert "expected done or verified" in lines[1]
    assert "held by agent-7" in lines[2]
    assert "4 mismatch(es)" in result.stderr
    assert await _photo(raw) == before


async def test_reconcile_is_clean_on_a_matching_export(
    ledger: Ledger, projector: Projector, database_url: str, tmp_path: Path
) -> None:
    """Every status the projection produces matches its export row: exit 0, no mismatch."""
    await register_workflows(ledger, "wf-done", "wf-run", "wf-fail", "wf-cancel", "wf-out")
    await _project(
        projector,
        Stream("wf-done").run("failed").run("completed"),
        Stream("wf-run").run("progressed"),
        Stream("wf-fail").run("timed_out"),
        Stream("wf-cancel").run("cancelled"),
    )
    await ledger.dispose("unit-wf-out", Disposition.DROPPED, OPERATOR)
    export = tmp_path / "executions.csv"
    export.write_text(
        "Workflow Id,Status,Close Time\n"
        f"wf-done,Failed,2026-01-05T09:00:00Z\n"
        f"wf-done,Completed,{CLOSED}\n"
        "wf-run,Running,\n"
        f"wf-fail,TimedOut,{CLOSED}\n"
        f"wf-cancel,Canceled,{CLOSED}\n"
        f"wf-out,Terminated,{CLOSED}\n"
    )
    result = await _run_cli(database_url, tmp_path, export)
    assert (result.returncode, result.stdout.startswith("reconcile clean")) == (0, True), (
        result.stdout + result.stderr
    )


async def test_reconcile_refuses_an_unreadable_export(database_url: str, tmp_path: Path) -> None:
    """A status it does not know: exit 2 naming the record and the statuses it accepts."""
    export = tmp_path / "executions.csv"
    export.write_text("workflow_id,status,close_time\nwf-1,Sleeping,\n")
    result = await _run_cli(database_url, tmp_path, export)
    assert result.returncode == 2
    assert "record 1" in result.stderr
    assert "Sleeping" in result.stderr


def test_load_executions_reads_temporal_cli_json_lines(tmp_path: Path) -> None:
    """`temporal workflow list -o jsonl` shape: nested execution ids, enum statuses."""
    export = tmp_path / "list.jsonl"
    rows = [
        {
            "execution": {"workflowId": "wf-1", "runId": "r1"},
            "status": "WORKFLOW_EXECUTION_STATUS_TIMED_OUT",
            "closeTime": "2026-01-05T10:00:00.123Z",
        },
        {"execution": {"workflowId": "wf-2"}, "status": "WORKFLOW_EXECUTION_STATUS_RUNNING"},
    ]
    export.write_text("\n".join(json.dumps(r) for r in rows))
    assert load_executions(export) == [
        Execution("wf-1", "timed_out", dt.datetime(2026, 1, 5, 10, 0, 0, 123000, tzinfo=dt.UTC)),
        Execution("wf-2", "running", None),
    ]


def test_normalize_status_refuses_an_unknown_status() -> None:
    """An unknown status is an error naming the accepted ones, never a silent skip."""
    with pytest.raises(InvalidInput, match="expected one of running"):
        normalize_status("Paused")


def test_latest_runs_prefers_a_running_run_then_the_last_closed() -> None:
    """Several runs of one workflow: the running one counts, else the last to close."""
    early = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    runs = [
        Execution("wf-1", "failed", early),
        Execution("wf-1", "running", None),
        Execution("wf-2", "completed", early + dt.timedelta(hours=1)),
        Execution("wf-2", "failed", early),
    ]
    assert {w: e.status for w, e in latest_runs(runs).items()} == {
        "wf-1": "running",
        "wf-2": "completed",
    }


def test_compare_skips_closed_units_purged_by_retention() -> None:
    """With a retention cut-off, a unit closed before it may be missing from the export."""
    long_ago = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    units = [
        LedgerUnit("old", "wf-old", State.DONE, "MIGRATED", long_ago, None),
        LedgerUnit("open", "wf-open", State.READY, None, None, None),
    ]
    cut = long_ago + dt.timedelta(days=30)
    assert [m.external_ref for m in compare(units, [], purged_before=cut)] == ["open"]
    assert [m.external_ref for m in compare(units, [])] == ["old", "open"]
