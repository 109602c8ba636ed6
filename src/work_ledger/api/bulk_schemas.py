"""Wire models of bulk operations (DESIGN §13): the filter and action accepted, the answer."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic import Strict as StrictMark

from work_ledger.api.schemas import Body, ExternalRef, Name
from work_ledger.domain.model import Disposition, State
from work_ledger.service.bulk import DEFAULT_LIMIT, MAX_LIMIT, BulkAction

BulkReason = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2000),
    Field(description="Why these units change; every event of the run records it."),
]
BulkLimit = Annotated[
    int,
    StrictMark(),
    Field(
        ge=1,
        le=MAX_LIMIT,
        description="At most this many units may match (any state); more is a 422 naming "
        "the count, and nothing changes.",
    ),
]


class BulkFilterIn(Body):
    fleet: Name
    domain: Name | None = None
    state: Annotated[
        list[State] | None,
        Field(min_length=1, max_length=len(State), description="Only units in these states."),
    ] = None
    external_ref_prefix: ExternalRef | None = Field(
        None, description="Only units whose external_ref starts with this (no wildcards)."
    )
    held_by: Name | None = Field(None, description="Only units this agent holds.")


class BulkIn(Body):
    filter: BulkFilterIn
    action: BulkAction
    disposition: Disposition | None = Field(
        None, description="dispose: the disposition (required); release: none."
    )
    reason: BulkReason
    dry_run: Annotated[
        bool,
        StrictMark(),
        Field(description="true (the default): answer what would change, change nothing."),
    ] = True
    limit: BulkLimit = DEFAULT_LIMIT


class BulkChangedOut(BaseModel):
    model_config = ConfigDict(from_attributes=True, serialize_by_alias=True)

    id: uuid.UUID
    external_ref: str
    from_state: State = Field(serialization_alias="from")
    to_state: State = Field(serialization_alias="to")


class BulkSkippedOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    external_ref: str
    state: State
    rule: str = Field(description="The ledger rule that keeps this unit as it is.")
    reason: str = Field(description="Why it was skipped and what is allowed from its state.")


class BulkOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    dry_run: bool
    matched: int = Field(description="How many units the filter matched, in any state.")
    changed: list[BulkChangedOut]
    skipped: list[BulkSkippedOut]
    operation_id: uuid.UUID | None = Field(
        description="A real run's id, in each of its events' detail.bulk.operation; "
        "null for a dry run."
    )
