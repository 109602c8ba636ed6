"""The worker interceptor: a workflow's start and close, forwarded to the ledger.

Workflow code must stay deterministic, so the interceptor never does I/O itself: it
schedules the local activity `work_ledger.project_events` (registered by
`work_ledger.temporal.plugin.WorkLedgerPlugin`), which POSTs outside the sandbox. A local
activity's result is recorded in the history, so a replay never sends again, and its
retries reuse one Idempotency-Key and one source_event_id. A ledger that stays
unreachable is logged, never allowed to fail the business workflow; `work-ledger
reconcile` finds what was missed.

Forwarded: `started` (before the workflow body), then `completed` (with an evidence link:
the result's `evidence_url`, else the configured template; without one it is not sent,
since the ledger verifies only with evidence), `failed` (the workflow raised a Temporal
failure) or `cancelled`; `progressed` when the workflow calls `report_progress()` (it
extends the unit's lease). Not forwarded: `terminated` and `timed_out` (no worker code
runs when a run is terminated or times out); a history exporter or reconcile covers
them. A run that continues-as-new sends nothing on close: the next run starts.

Needs the `temporal` extra (`pip install 'work-ledger[temporal]'`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, ClassVar

try:
    from temporalio import workflow
    from temporalio.common import RetryPolicy
    from temporalio.exceptions import FailureError, is_cancelled_exception
    from temporalio.worker import (
        ExecuteWorkflowInput,
        Interceptor,
        WorkflowInboundInterceptor,
        WorkflowInterceptorClassInput,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "work_ledger.temporal.interceptor needs the Temporal SDK: "
        "pip install 'work-ledger[temporal]'"
    ) from exc

from work_ledger.temporal.events import ACTIVITY_NAME, evidence_url, lifecycle_event

DEFAULT_RETRY = RetryPolicy(
    initial_interval=dt.timedelta(seconds=1),
    maximum_interval=dt.timedelta(seconds=30),
    maximum_attempts=10,
    non_retryable_error_types=["ForwardRefused"],
)


def close_kind(error: BaseException | None) -> str | None:
    """The ledger event a run's end means, or None when the run has not ended for good."""
    if error is None:
        return "completed"
    if isinstance(error, workflow.ContinueAsNewError):
        return None
    if is_cancelled_exception(error):
        return "cancelled"
    if isinstance(error, FailureError):
        return "failed"
    # Any other exception fails the workflow *task*, which Temporal retries: not an end.
    return None


async def report_progress(detail: Mapping[str, Any] | None = None) -> None:
    """Call from workflow code to tell the ledger the run is alive (a `progressed` event).

    Works only on a worker with `WorkLedgerPlugin`; elsewhere it logs and does nothing.
    """
    await _forward(_Current.interceptor, "progressed", detail)


class _Current:
    """The interceptor the running workflow was started under (one per worker: a process
    running two workers with different settings would share the last one set)."""

    interceptor: WorkLedgerInterceptor | None = None


class WorkLedgerInterceptor(Interceptor):
    """Forwards every workflow's lifecycle on this worker to the ledger."""

    def __init__(
        self,
        *,
        evidence_url_template: str | None = None,
        start_to_close: dt.timedelta = dt.timedelta(seconds=30),
        retry_policy: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        self.evidence_url_template = evidence_url_template
        self.start_to_close = start_to_close
        self.retry_policy = retry_policy

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        config = self

        class _Bound(_LedgerInbound):
            interceptor = config

        return _Bound


class _LedgerInbound(WorkflowInboundInterceptor):
    interceptor: ClassVar[WorkLedgerInterceptor]

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        _Current.interceptor = self.interceptor
        await self._forward("started")
        try:
            result = await self.next.execute_workflow(input)
        except BaseException as error:
            kind = close_kind(error)
            if kind is not None:
                await self._forward(kind, {"error": str(error)[:2000]})
            raise
        info = workflow.info()
        link = evidence_url(
            result,
            template=self.interceptor.evidence_url_template,
            namespace=info.namespace,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )
        if link is None:
            workflow.logger.warning(
                "work-ledger: %s completed without an evidence link; not forwarded (return "
                "{'evidence_url': ...} or set evidence_url_template)",
                info.workflow_id,
            )
        else:
            await self._forward("completed", {"evidence_url": link})
        return result

    async def _forward(self, kind: str, detail: Mapping[str, Any] | None = None) -> None:
        await _forward(self.interceptor, kind, detail)


async def _forward(
    interceptor: WorkLedgerInterceptor | None, kind: str, detail: Mapping[str, Any] | None
) -> None:
    info = workflow.info()
    if interceptor is None:
        workflow.logger.warning(
            "work-ledger: no WorkLedgerPlugin on this worker; %s not sent", kind
        )
        return
    event = lifecycle_event(
        kind,
        namespace=info.namespace,
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        occurred_at=workflow.now(),
        history_length=info.get_current_history_length(),
        detail=detail,
    )
    try:
        await workflow.execute_local_activity(
            ACTIVITY_NAME,
            [event],
            start_to_close_timeout=interceptor.start_to_close,
            retry_policy=interceptor.retry_policy,
        )
    except Exception as exc:  # the ledger must never fail the business workflow
        workflow.logger.warning(
            "work-ledger: could not project %s of %s: %s", kind, info.workflow_id, exc
        )
