"""The lifecycle vocabulary and the exactly-once keys, shared by every source. Pure.

A unit follows its workflow through seven *steps*: `started`, `progressed`, and the run's
close (`completed`, `failed`, `timed_out`, `cancelled`, `terminated`). The projection takes
a step by its own word or by Temporal's event type name, in either of Temporal's spellings
(`WorkflowExecutionTerminated`, `EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED`). Every other
Temporal event type (`ActivityTaskCompleted`, `TimerFired`, `WorkflowExecutionContinuedAsNew`,
…) is `noted`: recorded once, a sign of life, never a transition (a run that continues as
new closes, but its unit follows the next run, whose start is its own event).

Keys (`source_event_id`): `temporal/<namespace>/<workflow_id>/<run_id>/<event>`, where
`<event>` is the history event id, except for a run's close, which is `close`: a run closes
exactly once, and the worker plugin (inside the run, before the close event exists), the
follower (reading the closed run) and a history exporter (posting the close event with its
id) must all derive the same key for it. The start is history event 1 of every run.
"""

from __future__ import annotations

import re

DEFAULT_NAMESPACE = "default"
STEPS = (
    "started",
    "progressed",
    "completed",
    "failed",
    "cancelled",
    "terminated",
    "timed_out",
)
CLOSE_STEPS = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out"})
NOTED = "noted"
CLOSE_KEY = "close"

_WORKFLOW_STEPS = {
    "WorkflowExecutionStarted": "started",
    "WorkflowExecutionCompleted": "completed",
    "WorkflowExecutionFailed": "failed",
    "WorkflowExecutionTimedOut": "timed_out",
    "WorkflowExecutionCanceled": "cancelled",
    "WorkflowExecutionTerminated": "terminated",
}
# Temporal's EventType enum (temporal/api/enums/v1/event_type.proto), UNSPECIFIED left out;
# a test compares it with the SDK's.
TEMPORAL_EVENT_TYPES = frozenset(
    {
        *_WORKFLOW_STEPS,
        "WorkflowTaskScheduled",
        "WorkflowTaskStarted",
        "WorkflowTaskCompleted",
        "WorkflowTaskTimedOut",
        "WorkflowTaskFailed",
        "ActivityTaskScheduled",
        "ActivityTaskStarted",
        "ActivityTaskCompleted",
        "ActivityTaskFailed",
        "ActivityTaskTimedOut",
        "ActivityTaskCancelRequested",
        "ActivityTaskCanceled",
        "TimerStarted",
        "TimerFired",
        "TimerCanceled",
        "WorkflowExecutionCancelRequested",
        "RequestCancelExternalWorkflowExecutionInitiated",
        "RequestCancelExternalWorkflowExecutionFailed",
        "ExternalWorkflowExecutionCancelRequested",
        "MarkerRecorded",
        "WorkflowExecutionSignaled",
        "WorkflowExecutionContinuedAsNew",
        "StartChildWorkflowExecutionInitiated",
        "StartChildWorkflowExecutionFailed",
        "ChildWorkflowExecutionStarted",
        "ChildWorkflowExecutionCompleted",
        "ChildWorkflowExecutionFailed",
        "ChildWorkflowExecutionCanceled",
        "ChildWorkflowExecutionTimedOut",
        "ChildWorkflowExecutionTerminated",
        "SignalExternalWorkflowExecutionInitiated",
        "SignalExternalWorkflowExecutionFailed",
        "ExternalWorkflowExecutionSignaled",
        "UpsertWorkflowSearchAttributes",
        "WorkflowExecutionUpdateAdmitted",
        "WorkflowExecutionUpdateAccepted",
        "WorkflowExecutionUpdateRejected",
        "WorkflowExecutionUpdateCompleted",
        "WorkflowPropertiesModifiedExternally",
        "ActivityPropertiesModifiedExternally",
        "WorkflowPropertiesModified",
        "NexusOperationScheduled",
        "NexusOperationStarted",
        "NexusOperationCompleted",
        "NexusOperationFailed",
        "NexusOperationCanceled",
        "NexusOperationTimedOut",
        "NexusOperationCancelRequested",
        "WorkflowExecutionOptionsUpdated",
        "NexusOperationCancelRequestCompleted",
        "NexusOperationCancelRequestFailed",
        "WorkflowExecutionPaused",
        "WorkflowExecutionUnpaused",
        "WorkflowExecutionTimeSkippingTransitioned",
    }
)
# A closed execution's status (WorkflowExecutionStatus, any spelling normalized to lower
# snake case) and the step it means; continued_as_new is no step of the unit.
STATUS_STEPS = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "canceled": "cancelled",
    "cancelled": "cancelled",
    "terminated": "terminated",
}


def temporal_name(event_type: str) -> str | None:
    """Temporal's CamelCase name for `WorkflowTaskStarted` or `EVENT_TYPE_WORKFLOW_TASK_STARTED`;
    None when the word is not one of Temporal's event types."""
    if event_type.startswith("EVENT_TYPE_") and re.fullmatch(r"[A-Z_]+", event_type):
        parts = event_type.removeprefix("EVENT_TYPE_").split("_")
        event_type = "".join(p.capitalize() for p in parts)
    return event_type if event_type in TEMPORAL_EVENT_TYPES else None


def step_of(event_type: str) -> str | None:
    """The step an event type means (one of STEPS, or NOTED); None for an unknown word."""
    if event_type in STEPS:
        return event_type
    name = temporal_name(event_type)
    if name is None:
        return None
    return _WORKFLOW_STEPS.get(name, NOTED)


def source_event_id(namespace: str | None, workflow_id: str, run_id: str, event: int | str) -> str:
    """The exactly-once key of one step of one run (format in the module docstring)."""
    return f"temporal/{namespace or DEFAULT_NAMESPACE}/{workflow_id}/{run_id}/{event}"


def step_key(namespace: str | None, workflow_id: str, run_id: str, step: str, event_id: int) -> str:
    """The key every source derives for `step` of a run: a close is `close`, the rest their
    history event id."""
    event: int | str = CLOSE_KEY if step in CLOSE_STEPS else event_id
    return source_event_id(namespace, workflow_id, run_id, event)
