"""Temporal's own event type names on POST /projection/events, and the one key per close."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.projection_streams import EVIDENCE, register_workflows
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.lifecycle import NOTED, STEPS, step_of, temporal_name


def _event(event_type: str, event_id: int, **detail: Any) -> dict[str, Any]:
    return {
        "namespace": "migrations",
        "workflow_id": "wf-1",
        "run_id": "run-1",
        "event_id": event_id,
        "type": event_type,
        "occurred_at": f"2026-01-05T09:{event_id:02d}:00Z",
        "detail": detail,
    }


async def _post(client: httpx.AsyncClient, *events: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/projection/events", json={"events": list(events)})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize(
    ("word", "step"),
    [
        ("WorkflowExecutionStarted", "started"),
        ("EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED", "terminated"),
        ("WorkflowExecutionTimedOut", "timed_out"),
        ("EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED", "cancelled"),
        ("ActivityTaskCompleted", NOTED),
        ("EVENT_TYPE_TIMER_FIRED", NOTED),
        ("WorkflowExecutionContinuedAsNew", NOTED),
        ("failed", "failed"),
        ("paused", None),
        ("EVENT_TYPE_NOT_A_THING", None),
        ("workflowexecutionstarted", None),
    ],
)
def test_step_of_reads_both_vocabularies(word: str, step: str | None) -> None:
    """Lifecycle words and Temporal's names map to a step; anything else to None."""
    assert step_of(word) == step


def test_temporal_name_spellings_agree() -> None:
    """The enum spelling and the CamelCase spelling name the same event type."""
    assert temporal_name("EVENT_TYPE_WORKFLOW_TASK_STARTED") == "WorkflowTaskStarted"
    assert set(STEPS) >= {step_of("WorkflowExecutionCompleted")}


async def test_temporal_history_is_projected_as_exported(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """A history posted unchanged: the start and close apply, the rest is noted once."""
    await register_workflows(ledger, "wf-1")
    history = [
        _event("EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", 1),
        _event("EVENT_TYPE_WORKFLOW_TASK_SCHEDULED", 2),
        _event("ActivityTaskCompleted", 7),
        _event("TimerFired", 9),
        _event("WorkflowExecutionCompleted", 12, evidence_url=EVIDENCE),
    ]
    first = await _post(projector_client, *history)
    again = await _post(projector_client, *history)
    counts = ("applied", "duplicates", "refused", "stale", "unmatched")
    assert [first[k] for k in counts] == [5, 0, 0, 0, 0]
    assert [again[k] for k in counts] == [0, 5, 0, 0, 0]
    assert first["results"][4]["source_event_id"] == "temporal/migrations/wf-1/run-1/close"
    unit = (await ledger.get_unit("unit-wf-1")).unit
    assert (unit.state, unit.evidence_urls) == ("verified", [EVIDENCE])
    assert await ledger.audit() == []


async def test_noted_event_never_fails_a_batch_nor_blocks_a_late_start(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """An activity's event before the start (out of order), and one on a unit that is not
    the workflow's to move: recorded, nothing refused, and the late start still applies."""
    await register_workflows(ledger, "wf-1")
    noted = await _post(projector_client, _event("ActivityTaskStarted", 5))
    late = await _post(projector_client, _event("WorkflowExecutionStarted", 1))
    assert (noted["applied"], noted["results"][0]["to_state"]) == (1, "ready")
    assert (late["applied"], late["results"][0]["to_state"]) == (1, "in_progress")


async def test_noted_event_is_a_sign_of_life(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """A Temporal event on a running unit extends the workflow's lease (a heartbeat)."""
    await register_workflows(ledger, "wf-1")
    await _post(projector_client, _event("WorkflowExecutionStarted", 1))
    before = (await ledger.get_unit("unit-wf-1")).unit.lease_expires_at
    await _post(projector_client, _event("MarkerRecorded", 30))
    after = (await ledger.get_unit("unit-wf-1")).unit
    assert before is not None
    assert after.lease_expires_at is not None
    assert (after.state, after.lease_expires_at > before) == ("in_progress", True)


async def test_close_key_is_shared_by_the_plugin_and_an_exporter(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """The plugin's close (no event id of its own) and the exported close event are one
    step: the second is a duplicate, whatever its type's spelling or its event id."""
    await register_workflows(ledger, "wf-1")
    plugin = _event("failed", 6) | {"source_event_id": "temporal/migrations/wf-1/run-1/close"}
    await _post(projector_client, _event("started", 1), plugin)
    exported = await _post(projector_client, _event("EVENT_TYPE_WORKFLOW_EXECUTION_FAILED", 11))
    assert (exported["applied"], exported["duplicates"]) == (0, 1)


async def test_unknown_type_is_a_422_naming_the_field(
    ledger: Ledger, projector_client: httpx.AsyncClient
) -> None:
    """A word that is neither a step nor a Temporal event type: 422, nothing written."""
    await register_workflows(ledger, "wf-1")
    good, bad = _event("WorkflowExecutionStarted", 1), _event("EVENT_TYPE_NAPPING", 2)
    response = await projector_client.post("/projection/events", json={"events": [good, bad]})
    assert response.status_code == 422
    assert "events[1].type" in response.json()["detail"]
    assert (await ledger.get_unit("unit-wf-1")).unit.state == "ready"
