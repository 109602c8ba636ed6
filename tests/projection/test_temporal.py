"""The Temporal side without a Temporal server or its SDK: events, keys, and delivery with
retries. What needs the SDK is in test_temporal_sdk.py; what needs a running server (the
interceptor in a real worker, replay, the follower) in tests/temporal/.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from support.projection_streams import EVIDENCE, register_workflows, token
from work_ledger.domain.model import State
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role
from work_ledger.temporal.events import (
    evidence_url,
    idempotency_key,
    lifecycle_event,
)
from work_ledger.temporal.forwarder import ForwardRefused, ForwardUnavailable, LedgerForwarder
from work_ledger.temporal.lifecycle import source_event_id

AT = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


def _lifecycle(kind: str, **detail: Any) -> dict[str, Any]:
    return lifecycle_event(
        kind,
        namespace="migrations",
        workflow_id="wf-1",
        run_id="run-1",
        occurred_at=AT + dt.timedelta(minutes=1 if kind != "started" else 0),
        history_length=12,
        detail=detail,
    )


async def _noop_sleep(_: float) -> None:
    return None


class Flaky(httpx.AsyncBaseTransport):
    """The real app behind a network that misbehaves as scripted, one step per request."""

    def __init__(self, app: FastAPI, *script: str) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.script = list(script)
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        step = self.script.pop(0) if self.script else "ok"
        if step == "refused":
            raise httpx.ConnectError("connection refused", request=request)
        if step == "503":
            return httpx.Response(503, json={"detail": "the database cannot be reached"})
        response = await self.inner.handle_async_request(request)
        if step == "lost":  # the ledger did the work; its answer never arrives
            await response.aread()
            raise httpx.ReadError("connection reset", request=request)
        return response


async def _forwarder(
    app: FastAPI, *script: str, attempts: int = 5
) -> tuple[LedgerForwarder, Flaky]:
    transport = Flaky(app, *script)
    secret = await token(app, Role.PROJECTOR, "temporal")
    forwarder = LedgerForwarder(
        "http://ledger.test", secret, transport=transport, attempts=attempts, sleep=_noop_sleep
    )
    return forwarder, transport


def test_started_key_is_the_key_the_ledger_builds() -> None:
    """started is history event 1 of its run; the key matches the ledger's own format."""
    event = _lifecycle("started")
    assert event["source_event_id"] == source_event_id("migrations", "wf-1", "run-1", 1)
    assert event["event_id"] == 1


def test_close_key_is_one_per_run_and_ordered_after_start() -> None:
    """Every close of a run shares one key, so a run closes at most once in the ledger."""
    closes = ("completed", "failed", "cancelled", "terminated", "timed_out")
    keys = {_lifecycle(kind)["source_event_id"] for kind in closes}
    assert keys == {"temporal/migrations/wf-1/run-1/close"}
    assert _lifecycle("failed")["event_id"] == 12


def test_progress_key_is_the_history_length_at_the_call() -> None:
    """progressed reports are keyed by where the history stands, so each is projected once."""
    event = _lifecycle("progressed")
    assert (event["source_event_id"], event["event_id"]) == (
        "temporal/migrations/wf-1/run-1/12",
        12,
    )


def test_lifecycle_event_refuses_words_that_are_no_step() -> None:
    """Only started, progressed and the closes are lifecycle events: anything else is an error."""
    with pytest.raises(ValueError, match="started, progressed or a close"):
        _lifecycle("TimerFired")


def test_evidence_url_prefers_the_result_then_the_template() -> None:
    """The result's evidence_url wins; else the template is filled in; else None."""
    where = {"namespace": "ns", "workflow_id": "wf-1", "run_id": "r-1"}
    template = "https://temporal.example/{namespace}/{workflow_id}/{run_id}"
    assert evidence_url({"evidence_url": EVIDENCE}, template=template, **where) == EVIDENCE
    assert (
        evidence_url("done", template=template, **where) == "https://temporal.example/ns/wf-1/r-1"
    )
    assert evidence_url("done", template=None, **where) is None


def test_idempotency_key_is_stable_per_batch() -> None:
    """The same batch always gets the same key; a different batch another one."""
    batch = [_lifecycle("started")]
    assert idempotency_key(batch) == idempotency_key([dict(batch[0])])
    assert idempotency_key(batch) != idempotency_key([_lifecycle("failed")])


async def test_forwarder_retries_through_a_lost_response_without_applying_twice(
    ledger: Ledger, app: FastAPI
) -> None:
    """Refused connection, then a lost response, then success: the unit moves once."""
    await register_workflows(ledger, "wf-1")
    forwarder, transport = await _forwarder(app, "refused", "lost")
    batch = [_lifecycle("started"), _lifecycle("completed", evidence_url=EVIDENCE)]
    counts = await forwarder.send(batch)
    detail = await ledger.get_unit("unit-wf-1")
    assert transport.calls == 3
    assert (counts["applied"], counts["duplicates"]) == (2, 0)  # the stored first outcome
    assert (detail.unit.state, len(detail.attempts)) == (State.VERIFIED, 1)
    assert await ledger.audit() == []


async def test_forwarder_sends_a_new_batch_of_old_events_as_duplicates(
    ledger: Ledger, app: FastAPI
) -> None:
    """Events already delivered in another batch come back as duplicates, not applied."""
    await register_workflows(ledger, "wf-1")
    forwarder, _ = await _forwarder(app)
    await forwarder.send([_lifecycle("started")])
    counts = await forwarder.send([_lifecycle("started"), _lifecycle("failed")])
    assert (counts["applied"], counts["duplicates"]) == (1, 1)


async def test_forwarder_gives_up_at_once_on_a_refused_batch(app: FastAPI) -> None:
    """A 422 (completed without evidence) is not retried: one request, ForwardRefused."""
    forwarder, transport = await _forwarder(app)
    with pytest.raises(ForwardRefused, match="evidence_url") as refused:
        await forwarder.send([_lifecycle("completed")])
    assert (refused.value.status, transport.calls) == (422, 1)


async def test_forwarder_reports_unavailable_after_its_attempts(app: FastAPI) -> None:
    """503 on every attempt: ForwardUnavailable after exactly `attempts` requests."""
    forwarder, transport = await _forwarder(app, "503", "503", "503", attempts=3)
    with pytest.raises(ForwardUnavailable, match="after 3 attempts"):
        await forwarder.send([_lifecycle("started")])
    assert transport.calls == 3
