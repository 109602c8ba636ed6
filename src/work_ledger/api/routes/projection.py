"""Projection ingest: Temporal workflow events, each applied to its unit exactly once."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated

from fastapi import APIRouter, Request, Response
from pydantic import AwareDatetime, BaseModel, Field, StringConstraints
from pydantic import Strict as StrictMark

from work_ledger.api import problems
from work_ledger.api.schemas import Body
from work_ledger.api.wire import MAX_FREE_DEPTH, FreeJson, answer
from work_ledger.api.writes import WriteOf
from work_ledger.service.keyed import Keying
from work_ledger.service.ledger import MAX_BATCH, Ledger
from work_ledger.service.tokens import Role
from work_ledger.temporal.ingest import (
    MAX_EVENT_ID,
    MAX_ID,
    EventOutcome,
    EventResult,
    ProjectionReport,
    Projector,
    WorkflowEvent,
)

router = APIRouter(tags=["projection"], responses=problems.WRITE_RESPONSES)
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID)]


class WorkflowEventIn(Body):
    source_event_id: Id | None = Field(
        None,
        description="The exactly-once key. Omit it to have the ledger build "
        "temporal/<namespace>/<workflow_id>/<run_id>/<event_id>.",
    )
    namespace: Id | None = Field(None, description="Temporal namespace (default `default`).")
    workflow_id: Id = Field(description="Matches work_units.workflow_id.")
    run_id: Id | None = None
    event_id: Annotated[int, StrictMark(), Field(ge=1, le=MAX_EVENT_ID)] | None = Field(
        None, description="The history event id (restarts at 1 in every run)."
    )
    type: Id = Field(
        description="A lifecycle step (started, progressed, completed, failed, cancelled, "
        "terminated, timed_out) or a Temporal event type name (WorkflowExecutionStarted, "
        "EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, ...); other Temporal events are recorded "
        "as a sign of life."
    )
    occurred_at: AwareDatetime
    detail: FreeJson = Field(
        default_factory=dict,
        description="Free JSON kept with the event; `evidence_url` is required for completed. "
        f"Nests at most {MAX_FREE_DEPTH} levels.",
    )


class ProjectionIn(Body):
    events: list[WorkflowEventIn] = Field(min_length=1, max_length=MAX_BATCH)


class ProjectionOut(BaseModel):
    applied: int = Field(description="Newly recorded and applied to their unit.")
    duplicates: int = Field(description="Already recorded: changed nothing.")
    refused: int = Field(description="Recorded, but the state machine refused them.")
    stale: int = Field(description="Recorded, older than an event already projected.")
    unmatched: int = Field(description="No unit has their workflow_id: not recorded.")
    results: list[EventResult]

    @classmethod
    def of(cls, report: ProjectionReport) -> ProjectionOut:
        """One count per outcome, then each event's result in order."""
        return cls(
            applied=report.count(EventOutcome.APPLIED),
            duplicates=report.count(EventOutcome.DUPLICATE),
            refused=report.count(EventOutcome.REFUSED),
            stale=report.count(EventOutcome.STALE),
            unmatched=report.count(EventOutcome.UNMATCHED),
            results=report.results,
        )


PROJECT_EVENTS = WriteOf(ProjectionIn, Role.PROJECTOR)


@router.post(
    "/projection/events",
    response_model=ProjectionOut,
    openapi_extra=PROJECT_EVENTS.doc(),
    operation_id="projectEvents",
)
async def project_events(request: Request) -> Response:
    """Record workflow events and apply each new one to its unit (see the README's mapping)."""
    w = await PROJECT_EVENTS(request)
    events = [WorkflowEvent(**e.model_dump()) for e in w.body.events]

    def project(svc: Ledger) -> Awaitable[ProjectionReport]:
        return Projector(svc).project(events)

    # Apart: each event is a transaction of its own, applied once by its own key.
    return await w.run(
        Keying.APART,
        project,
        lambda report: answer(ProjectionOut.of(report)),
    )
