"""The shape of the work (DESIGN §12): split a unit into children, waive a requirement."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from work_ledger.api import problems
from work_ledger.api.answers import SplitOut, UnitOnly, UnitRefOut
from work_ledger.api.request_state import unit_logged
from work_ledger.api.schemas import SplitIn, WaiveIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.domain.model import Unit
from work_ledger.service.keyed import Keying
from work_ledger.service.shape import NewChild, Split
from work_ledger.service.tokens import Role

router = APIRouter(tags=["units"], responses=problems.WRITE_RESPONSES)
UnitRef = Annotated[
    str,
    Path(min_length=1, max_length=256, description="The unit's id (uuid) or its external_ref."),
]


SPLIT = WriteOf(SplitIn, Role.AGENT)


@router.post(
    "/units/{unit:path}/split",
    status_code=201,
    response_model=SplitOut,
    openapi_extra=SPLIT.doc(),
    operation_id="splitUnit",
)
async def split(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Hand back an in_progress unit that is too big as children (its holder, or an
    operator). The children are registered (fleet inherited, domain defaulting to the
    parent's, a child's `requires` may name its siblings), your attempt ends `split`, and
    the unit waits on its children; once they are finished it is ready again, to be
    claimed, integrated, verified and disposed as a whole."""
    w = await SPLIT(request)
    children = [
        NewChild(
            c.external_ref,
            c.domain,
            tuple(c.requires),
            None if c.exclusive is None else tuple(c.exclusive),
        )
        for c in w.body.units
    ]

    def split_out(done: Split) -> Response:
        unit_logged(request, done.unit.id)
        children = [UnitRefOut(id=i, external_ref=r) for i, r in done.children]
        return answer(SplitOut(unit=done.unit, children=children), 201)

    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.split(
            unit, children, w.caller.actor(), reason=w.body.reason, attempt_id=w.body.attempt_id
        ),
        split_out,
    )


WAIVE = WriteOf(WaiveIn)


@router.post(
    "/units/{unit:path}/waive",
    response_model=UnitOnly,
    openapi_extra=WAIVE.doc(),
    operation_id="waivePrerequisite",
)
async def waive(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Stop one prerequisite holding this unit (operator): a DEAD or DEFERRED prerequisite
    never finishes. The unit becomes ready if nothing else holds it."""
    w = await WAIVE(request)

    def waived(found: Unit) -> Response:
        unit_logged(request, found.id)
        return answer(UnitOnly(found))

    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.waive(unit, w.body.prerequisite, w.caller.actor(), reason=w.body.reason),
        waived,
    )
