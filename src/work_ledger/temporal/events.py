"""Workflow lifecycle events as the ledger's projection endpoint takes them, built by the
worker plugin and the follower alike. Pure.

Keys (`lifecycle.step_key`), stable across worker restarts, history replays and sources:

- started: `temporal/<namespace>/<workflow_id>/<run_id>/1`, the run's real first history
  event (WorkflowExecutionStarted is event 1 of every run);
- progressed (reported by the workflow itself, `interceptor.report_progress`):
  `temporal/<namespace>/<workflow_id>/<run_id>/<history length>`, the history length at
  the call (two reports within one workflow task share it: the second is a duplicate);
- the run's close (completed, failed, timed_out, cancelled, terminated):
  `temporal/<namespace>/<workflow_id>/<run_id>/close`, whoever saw it. Its `event_id` is
  the history length when the plugin saw the workflow return, or the close event's id
  when the follower read it: either orders it after everything the run did.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from work_ledger.temporal.lifecycle import CLOSE_STEPS, step_key

ACTIVITY_NAME = "work_ledger.project_events"


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
    """One event of the projection's wire format (a JSON-ready dict); `history_length` is
    the run's history length when the step was seen (ignored for started: event 1)."""
    if kind == "started":
        event_id = 1
    elif kind == "progressed" or kind in CLOSE_STEPS:
        event_id = max(history_length, 2)
    else:
        raise ValueError(f"a lifecycle event is started, progressed or a close, not {kind!r}")
    key = step_key(namespace, workflow_id, run_id, kind, event_id)
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


def idempotency_key(events: Sequence[Mapping[str, Any]], salt: str = "") -> str:
    """One key per batch, the same on every retry of it (sha256 of its source ids). The
    follower salts it per pass: a later pass re-sending the same events must be told what
    they do now (duplicates), not the answer the ledger stored for the first delivery."""
    joined = "\n".join([salt, *(str(e["source_event_id"]) for e in events)])
    return "wl-projection-" + hashlib.sha256(joined.encode()).hexdigest()
