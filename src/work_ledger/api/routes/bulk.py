"""Bulk operations (DESIGN §13): dispose or release every unit a filter matches (operator)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from work_ledger.api import problems
from work_ledger.api.bulk_schemas import BulkIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.service.bulk import BulkFilter, BulkResult
from work_ledger.service.keyed import Keying

router = APIRouter(tags=["units"], responses=problems.READ_RESPONSES)


BULK_UNITS = WriteOf(BulkIn)


@router.post(
    "/units/bulk",
    operation_id="bulkUnits",
    responses=problems.WRITE_RESPONSES,
    response_model=BulkResult,
    openapi_extra=BULK_UNITS.doc(),
)
async def bulk_units(request: Request) -> Response:
    """Dispose or release every unit the filter matches (operator). `dry_run` (the
    default) changes nothing and answers exactly what the same request with `"dry_run":
    false` would do now; a real run changes all of `changed` in one transaction or
    nothing, each unit with its ordinary event carrying `detail.bulk`. A unit whose state
    does not allow the action is skipped with the rule; more matches than `limit` is a 422
    naming the count."""
    w = await BULK_UNITS(request)
    body = w.body
    where = BulkFilter(
        body.filter.fleet,
        domain=body.filter.domain,
        states=None if body.filter.state is None else tuple(body.filter.state),
        external_ref_prefix=body.filter.external_ref_prefix,
        held_by=body.filter.held_by,
    )

    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.bulk(
            body.action,
            where,
            w.caller.actor(),
            reason=body.reason,
            disposition=body.disposition,
            dry_run=body.dry_run,
            limit=body.limit,
        ),
        answer,
    )
