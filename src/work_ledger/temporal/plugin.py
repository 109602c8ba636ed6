"""The worker plugin: the interceptor plus the local activity that does the HTTP.

    from temporalio.worker import Worker
    from work_ledger.temporal.plugin import WorkLedgerPlugin

    worker = Worker(client, task_queue="migrations", workflows=[...], activities=[...],
                    plugins=[WorkLedgerPlugin("http://127.0.0.1:4001", token)])

`token` is a projector token (`work-ledger token create --role projector --principal
temporal`). Needs the `temporal` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError
    from temporalio.plugin import SimplePlugin
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "work_ledger.temporal.plugin needs the Temporal SDK: pip install 'work-ledger[temporal]'"
    ) from exc

from work_ledger.temporal.events import ACTIVITY_NAME
from work_ledger.temporal.forwarder import ForwardRefused, LedgerForwarder
from work_ledger.temporal.interceptor import WorkLedgerInterceptor


def project_activity(forwarder: LedgerForwarder) -> Callable[..., Any]:
    """The local activity the interceptor schedules: one batch, delivered by `forwarder`."""

    @activity.defn(name=ACTIVITY_NAME)
    async def project_events(events: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await forwarder.send(events)
        except ForwardRefused as exc:
            # A 4xx will not change on retry; Temporal's retry stops here.
            raise ApplicationError(str(exc), type="ForwardRefused", non_retryable=True) from exc

    return project_events


class WorkLedgerPlugin(SimplePlugin):
    """Adds the interceptor and its activity to a worker."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        evidence_url_template: str | None = None,
        forwarder: LedgerForwarder | None = None,
    ) -> None:
        super().__init__(
            "work-ledger",
            interceptors=[WorkLedgerInterceptor(evidence_url_template=evidence_url_template)],
            activities=[project_activity(forwarder or LedgerForwarder(url, token))],
        )
