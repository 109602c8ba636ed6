"""What POST /units/bulk accepts (DESIGN §13): the filter and the action. (Its answer is
service/bulk.py's `BulkResult`.)"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints
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
