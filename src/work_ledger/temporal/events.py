"""Workflow lifecycle events as the ledger's projection endpoint takes them. Pure.

Keys (the ledger's `source_event_id`), stable across worker restarts and history replays:

- started: `temporal/<namespace>/<workflow_id>/<run_id>/1`, the run's real first history
  event (WorkflowExecutionStarted is event 1 of every run);
- progressed (reported by the workflow itself, `interceptor.report_progress`):
  `temporal/<namespace>/<workflow_id>/<run_id>/<history length>`, the history length at
  the call (two reports within one workflow task share it: the second is a duplicate);
- the run's close (completed, failed, cancelled): `temporal/<namespace>/<workflow_id>/
  <run_id>/close`. Inside the workflow the close event's id is not known yet, but a run
  closes exactly once, so the key is still exactly-once. Its `event_id` is the history
  length when the workflow returned, which orders it after everything the run did.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

ACTIVITY_NAME = "work_ledger.project_events"
CLOSE_KINDS = ("completed", "failed", "cancelled")


def source_event_id(namespace: str, workflow_id: str, run_id: str, event: int | str) -> str:
    """The same format the ledger builds (`work_ledger.projection.build_source_event_id`)."""
    return f"temporal/{namespace}/{workflow_id}/{run_id}/{event}"


def lifecycle_event(
    kind: str,
    *,
    namespace: str,
    workflow_id: str,
    run_id: str,
    occurred_at: dt.datetime,
    history_length: int,
    detail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One event of the projection's wire format (a JSON-ready dict)."""
    if kind == "started":
        event_id, key = 1, source_event_id(namespace, workflow_id, run_id, 1)
    elif kind == "progressed":
        event_id = max(history_length, 2)
        key = source_event_id(namespace, workflow_id, run_id, event_id)
    elif kind in CLOSE_KINDS:
        event_id = max(history_length, 2)
        key = source_event_id(namespace, workflow_id, run_id, "close")
    else:
        raise ValueError(
            f"the interceptor forwards started, progressed and {', '.join(CLOSE_KINDS)}, "
            f"not {kind!r}"
        )
    if occurred_at.tzinfo is None:
        occurred_at = occurred_at.replace(tzinfo=dt.UTC)
    return {
        "source_event_id": key,
        "namespace": namespace,
        "workflow_id": workflow_id,
        "run_id": run_id,
        "event_id": event_id,
        "type": kind,
        "occurred_at": occurred_at.isoformat(),
        "detail": dict(detail or {}),
    }


def evidence_url(
    result: object, *, template: str | None, namespace: str, workflow_id: str, run_id: str
) -> str | None:
    """The evidence link of a completed run: the workflow result's `evidence_url` if it
    returns a mapping with one, else the template filled in, else None."""
    if isinstance(result, Mapping) and isinstance(result.get("evidence_url"), str):
        found: str = result["evidence_url"]
        return found
    if template is None:
        return None
    return template.format(namespace=namespace, workflow_id=workflow_id, run_id=run_id)


def idempotency_key(events: Sequence[Mapping[str, Any]]) -> str:
    """One key per batch, the same on every retry of it (sha256 of its source ids)."""
    joined = "\n".join(str(e["source_event_id"]) for e in events)
    return "wl-projection-" + hashlib.sha256(joined.encode()).hexdigest()
