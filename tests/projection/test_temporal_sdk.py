"""The worker side's pieces that need the Temporal SDK (the `temporal` extra), without a
server: how a run's end maps to a step, the plugin's activity, and the vocabulary."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

pytest.importorskip("temporalio")
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError

from work_ledger.temporal.events import ACTIVITY_NAME, lifecycle_event
from work_ledger.temporal.forwarder import LedgerForwarder
from work_ledger.temporal.interceptor import close_kind
from work_ledger.temporal.lifecycle import TEMPORAL_EVENT_TYPES, temporal_name
from work_ledger.temporal.plugin import WorkLedgerPlugin, project_activity

AT = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


def _started() -> dict[str, Any]:
    return lifecycle_event(
        "started",
        namespace="migrations",
        workflow_id="wf-1",
        run_id="run-1",
        occurred_at=AT,
        history_length=3,
    )


def test_event_type_names_are_the_sdk_enum() -> None:
    """The vocabulary knows every Temporal event type, in both spellings, and no other."""
    names = set(EventType.DESCRIPTOR.values_by_name) - {"EVENT_TYPE_UNSPECIFIED"}
    assert {temporal_name(n) for n in names} == TEMPORAL_EVENT_TYPES


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (None, "completed"),
        (ApplicationError("the migration broke"), "failed"),
        (asyncio.CancelledError(), "cancelled"),
        # Only the SDK may construct it; a bare instance is enough for isinstance.
        (workflow.ContinueAsNewError.__new__(workflow.ContinueAsNewError), None),
        (RuntimeError("a bug: Temporal retries the workflow task"), None),
    ],
)
def test_close_kind_maps_how_a_run_ended(error: BaseException | None, kind: str | None) -> None:
    """Completed, failed and cancelled are ends; continue-as-new and task failures are not."""
    assert close_kind(error) == kind


async def test_activity_turns_a_refusal_into_a_non_retryable_failure(app: FastAPI) -> None:
    """The plugin's activity raises a non-retryable ApplicationError on a 401."""
    bad = LedgerForwarder(
        "http://ledger.test", "wl_bad_token", transport=httpx.ASGITransport(app=app)
    )
    with pytest.raises(ApplicationError) as failure:
        await project_activity(bad)([_started()])
    assert (failure.value.non_retryable, failure.value.type) == (True, "ForwardRefused")


def test_plugin_carries_the_interceptor_and_the_activity() -> None:
    """The plugin holds the activity the interceptor schedules, under the same name."""
    plugin = WorkLedgerPlugin("http://127.0.0.1:4001", "wl_x_y")
    activities = plugin.activities
    assert isinstance(activities, list)
    names = [getattr(a, "__temporal_activity_definition").name for a in activities]
    assert names == [ACTIVITY_NAME]
    assert [type(i).__name__ for i in plugin.interceptors or []] == ["WorkLedgerInterceptor"]
