"""Wire models: what the API accepts (unknown fields refused, DESIGN §6 bounds) and returns."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, field_validator
from pydantic import Strict as StrictMark

from work_ledger.domain.model import (
    Attempt,
    Claim,
    Disposition,
    Outcome,
    Question,
    QuestionStatus,
    State,
    Unit,
)

MAX_LEASE_SECONDS = 86400
MAX_WAIT_SECONDS = 60
MAX_LIMIT = 500

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ExternalRef = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Text8000 = Annotated[str, StringConstraints(min_length=1, max_length=8000)]
Reason = Annotated[str, StringConstraints(max_length=2000)]
EvidenceUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    Field(description="An http(s) link to where the evidence lives, never the evidence itself."),
]
Slug = Annotated[str, StringConstraints(min_length=1, max_length=128)]
LeaseSeconds = Annotated[
    int,
    StrictMark(),
    Field(ge=1, le=MAX_LEASE_SECONDS, description="Lease length; default WL_LEASE_SECONDS."),
]
WaitSeconds = Annotated[
    int,
    StrictMark(),
    Field(ge=0, le=MAX_WAIT_SECONDS, description="Long-poll: wait up to this many seconds."),
]
AttemptId = Annotated[
    uuid.UUID | None,
    Field(description="Fencing: the attempt you believe is live; a superseded one is refused."),
]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _text_without_nul(cls, value: Any) -> Any:
        if isinstance(value, str) and "\x00" in value:
            raise ValueError(
                "text may not contain a NUL character (\\u0000), which PostgreSQL cannot "
                "store; remove it and send again"
            )
        return value


Requires = Annotated[
    list[ExternalRef],
    Field(
        max_length=50,
        description="Prerequisites: external_refs or ids of units registered earlier or in the "
        "same batch. The unit waits until each is done (or DROPPED).",
    ),
]
MaxAttempts = Annotated[
    int,
    StrictMark(),
    Field(ge=1, le=100, description="Attempt limit; default WL_MAX_ATTEMPTS."),
]
Count = Annotated[int, StrictMark(), Field(ge=0, le=10**15)]
Exclusive = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=200)]],
    Field(
        max_length=20,
        description="Exclusion keys (a module, a path prefix, a table; compared exactly): "
        "two units sharing a key are never held at the same time.",
    ),
]


class NewUnitIn(Body):
    external_ref: ExternalRef
    fleet: Name
    domain: Name | None = None
    workflow_id: Name | None = None
    requires: Requires = []
    max_attempts: MaxAttempts | None = None
    exclusive: Exclusive = []


class NewChildIn(Body):
    external_ref: ExternalRef
    domain: Name | None = None
    requires: Requires = []
    exclusive: Exclusive | None = Field(
        default=None, description="The child's exclusion keys; absent: the parent's."
    )


class SplitIn(Body):
    units: list[NewChildIn] = Field(min_length=1, max_length=100)
    reason: Reason | None = None
    attempt_id: AttemptId = None


class WaiveIn(Body):
    prerequisite: ExternalRef
    reason: Reason | None = None


class BudgetIn(Body):
    fleet: Name
    domain: Name | None = None
    cap_cents: Count


class RegisterIn(Body):
    units: list[NewUnitIn] = Field(min_length=1, max_length=1000)


class ClaimIn(Body):
    domain: Name | None = None
    lease_seconds: LeaseSeconds | None = None
    wait_seconds: WaitSeconds = 0


class LeaseIn(Body):
    lease_seconds: LeaseSeconds | None = None


class TransitionIn(Body):
    to: Literal["in_progress", "verified", "ready"]
    evidence_url: EvidenceUrl | None = None
    reason: Reason | None = None
    outcome: Literal["failed", "abandoned"] | None = Field(
        None, description="How a release (to=ready) ends the attempt; default abandoned."
    )
    attempt_id: AttemptId = None


class BlockIn(Body):
    question: Text8000
    assignee_group_slug: Slug = "agent-questions"
    attempt_id: AttemptId = None


class UnblockIn(Body):
    answer: Text8000
    question_id: uuid.UUID | None = None


class CostIn(Body):
    cost_cents: Annotated[int, StrictMark(), Field(ge=0, le=10**12)] = 0
    model: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cache_read_tokens: Count | None = None
    cache_write_tokens: Count | None = None
    estimated: Annotated[
        bool, StrictMark(), Field(description="The cents are a list-price estimate, not a bill.")
    ] = False
    includes_telemetry: Annotated[
        bool,
        StrictMark(),
        Field(
            description="The figures are a session's totals for `model` (Claude Code's "
            "result) that include what its telemetry already reported: only what they add "
            "above it is recorded. Needs `model`."
        ),
    ] = False


class DisposeIn(Body):
    disposition: Disposition
    evidence_url: EvidenceUrl | None = None
    reason: Reason | None = None
    attempt_id: AttemptId = None


class CancelIn(Body):
    reason: Reason | None = None


class RouteIn(Body):
    external_task_id: Annotated[
        str,
        StringConstraints(min_length=1, max_length=256),
        Field(description="The id of the item triage created for it in the human queue."),
    ]


# -- responses ----------------------------------------------------------------------------


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class UnitOut(Out):
    id: uuid.UUID
    created_at: dt.datetime
    updated_at: dt.datetime
    external_ref: str
    fleet: str
    domain: str
    state: State
    disposition: Disposition | None
    disposed_at: dt.datetime | None
    workflow_id: str | None
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    last_heartbeat_at: dt.datetime | None
    attempt_count: int
    cost_cents: int
    evidence_urls: list[str]
    parent_id: uuid.UUID | None
    max_attempts: int
    attempts_allowed: int
    failed_attempts: int
    unfinished_prerequisites: int
    exclusive: list[str] = []

    @field_validator("exclusive", mode="before")
    @classmethod
    def _none_is_no_keys(cls, value: Any) -> Any:
        return [] if value is None else value


class AttemptOut(Out):
    id: uuid.UUID
    unit_id: uuid.UUID
    attempt_no: int
    agent_id: str
    started_at: dt.datetime
    outcome: Outcome | None
    cost_cents: int
    evidence_url: str | None
    ended_at: dt.datetime | None


class QuestionOut(Out):
    id: uuid.UUID
    unit_id: uuid.UUID
    attempt_id: uuid.UUID | None
    question: str
    status: QuestionStatus
    answer: str | None
    assignee_group_slug: str
    external_task_id: str | None
    asked_by: str | None
    answered_by: str | None
    created_at: dt.datetime
    closed_at: dt.datetime | None


class EventOut(Out):
    id: int
    unit_id: uuid.UUID
    attempt_id: uuid.UUID | None
    event_type: str
    from_state: State | None
    to_state: State | None
    agent_id: str | None
    cost_delta_cents: int
    detail: dict[str, Any]
    source_event_id: str | None
    created_at: dt.datetime


class ModelCostOut(BaseModel):
    model: str | None
    cost_cents: int
    estimated_cents: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class AttemptDetailOut(AttemptOut):
    cost_by_model: list[ModelCostOut]


class UnitRefOut(BaseModel):
    id: uuid.UUID
    external_ref: str


class UnitStateOut(UnitRefOut):
    state: State
    disposition: Disposition | None


class UnitDetailOut(UnitOut):
    attempts: list[AttemptDetailOut]
    questions: list[QuestionOut]
    waiting_on: list[dict[str, Any]] = Field(
        description='What holds a waiting unit: {"kind": "prerequisite", "unit": {...}} or '
        '{"kind": "answer", "question_id"}; [] when the unit is not waiting.'
    )
    requires: list[UnitStateOut]
    parent: UnitRefOut | None
    children: list[UnitStateOut]
    subtree_cost_cents: int
    held_back_by: list[dict[str, Any]] = Field(
        default=[],
        description="Why a ready unit is skipped by a claim now, one object per reason: "
        '{"kind": "paused"|"cap"|"budget"|"exclusive", ...}; [] otherwise.',
    )


class SplitOut(BaseModel):
    unit: UnitOut
    children: list[UnitRefOut]


class BudgetOut(Out):
    fleet: str
    domain: str | None
    cap_cents: int
    spent_cents: int
    remaining_cents: int


class BudgetPage(BaseModel):
    items: list[BudgetOut]


class RegisteredOut(Out):
    id: uuid.UUID
    external_ref: str
    created: bool


class RegisterOut(BaseModel):
    created: int
    existing: int
    units: list[RegisteredOut]


class ClaimOut(BaseModel):
    unit: UnitOut | None
    attempt: AttemptOut | None
    resumed: bool


class UnitAttemptOut(BaseModel):
    unit: UnitOut
    attempt: AttemptOut


class UnitQuestionOut(BaseModel):
    unit: UnitOut
    question: QuestionOut


class DisposeOut(BaseModel):
    unit: UnitOut


# -- the hot writes' answers, written straight from the domain objects ----------------------
# Each adapter writes the same bytes as the response model beside it (the domain classes
# have the wire models' fields, in their order), without building that model first: about
# half the cost per answer. tests/api/test_api_request_path.py holds them to the same bytes.


@dataclass(frozen=True, slots=True)
class UnitAttempt:
    unit: Unit
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class UnitQuestion:
    unit: Unit
    question: Question


@dataclass(frozen=True, slots=True)
class UnitOnly:
    unit: Unit


CLAIM_JSON = TypeAdapter(Claim)  # ClaimOut
# UnitAttemptOut, and attempts.AttemptUnitOut (which, subclassing it, keeps its order)
UNIT_ATTEMPT_JSON = TypeAdapter(UnitAttempt)
UNIT_QUESTION_JSON = TypeAdapter(UnitQuestion)  # UnitQuestionOut
UNIT_ONLY_JSON = TypeAdapter(UnitOnly)  # DisposeOut


class UnitPage(BaseModel):
    items: list[UnitOut]
    next_cursor: str | None


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None


class QuestionPage(BaseModel):
    items: list[QuestionOut]
    next_cursor: str | None


class Health(BaseModel):
    status: Literal["ok"]
