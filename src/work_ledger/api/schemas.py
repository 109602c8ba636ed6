"""What the API accepts: request bodies, unknown fields refused, within DESIGN §6 bounds.
(What it answers: api/answers.py.)"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic import Strict as StrictMark

from work_ledger.domain.model import Disposition

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
