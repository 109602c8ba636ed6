"""The shape of the work (DESIGN §12): split a unit into children, waive a requirement."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response

from work_ledger.api import problems
from work_ledger.api.deps import Caller, IdempotentRoute, ledger, require, unit_logged
from work_ledger.api.schemas import UNIT_ONLY_JSON, DisposeOut, SplitIn, SplitOut, UnitOnly, WaiveIn
from work_ledger.api.wire import answer, answer_as, body_doc, json_body
from work_ledger.service.ledger import Ledger
from work_ledger.service.shape import NewChild
from work_ledger.service.tokens import Role

router = APIRouter(
    tags=["units"],
    route_class=IdempotentRoute,
    responses=problems.WRITE_RESPONSES,
)
UnitRef = Annotated[
    str,
    Path(min_length=1, max_length=256, description="The unit's id (uuid) or its external_ref."),
]
LedgerDep = Annotated[Ledger, Depends(ledger)]


@router.post(
    "/units/{unit:path}/split",
    status_code=201,
    response_model=SplitOut,
    openapi_extra=body_doc(SplitIn),
)
async def split(
    request: Request,
    unit: UnitRef,
    svc: LedgerDep,
    caller: Annotated[Caller, Depends(require(Role.AGENT))],
) -> Response:
    """Hand back an in_progress unit that is too big as children (its holder, or an
    operator). The children are registered (fleet inherited, domain defaulting to the
    parent's, a child's `requires` may name its siblings), your attempt ends `split`, and
    the unit waits on its children; once they are finished it is ready again, to be
    claimed, integrated, verified and disposed as a whole."""
    body = await json_body(request, SplitIn)
    children = [NewChild(c.external_ref, c.domain, tuple(c.requires)) for c in body.units]
    done = await svc.split(
        unit, children, caller.actor(), reason=body.reason, attempt_id=body.attempt_id
    )
    unit_logged(request, done.unit.id)
    return answer(
        SplitOut.model_validate(
            {
                "unit": done.unit,
                "children": [{"id": i, "external_ref": r} for i, r in done.children],
            },
            from_attributes=True,
        ),
        201,
    )


@router.post(
    "/units/{unit:path}/waive",
    response_model=DisposeOut,
    openapi_extra=body_doc(WaiveIn),
)
async def waive(
    request: Request,
    unit: UnitRef,
    svc: LedgerDep,
    caller: Annotated[Caller, Depends(require())],
) -> Response:
    """Stop one prerequisite holding this unit (operator): a DEAD or DEFERRED prerequisite
    never finishes. The unit becomes ready if nothing else holds it."""
    body = await json_body(request, WaiveIn)
    found = await svc.waive(unit, body.prerequisite, caller.actor(), reason=body.reason)
    unit_logged(request, found.id)
    return answer_as(UNIT_ONLY_JSON, UnitOnly(found))
