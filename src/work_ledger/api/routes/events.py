"""The event log, newest first: all of it, or one unit's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from work_ledger.api import problems
from work_ledger.api.answers import EventPage
from work_ledger.api.auth import Reader, token_doc
from work_ledger.api.request_state import ledger, unit_logged
from work_ledger.api.schemas import MAX_LIMIT
from work_ledger.domain.model import Event
from work_ledger.service.ledger import Ledger

router = APIRouter(tags=["events"], responses=problems.READ_RESPONSES)
LedgerDep = Annotated[Ledger, Depends(ledger)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
Cursor = Annotated[str | None, Query(max_length=512)]


def _page(items: list[Event], next_cursor: str | None) -> EventPage:
    return EventPage(items=items, next_cursor=next_cursor)


@router.get("/events", operation_id="listEvents", openapi_extra=token_doc())
async def list_events(
    svc: LedgerDep, _: Reader, limit: Limit = 100, cursor: Cursor = None
) -> EventPage:
    """Every unit's events, newest first (keyset: pass `next_cursor` back as `cursor`)."""
    page = await svc.list_events(limit=limit, cursor=cursor)
    return _page(page.items, page.next_cursor)


# Included before the units router: `/units/{unit:path}` would otherwise swallow `/events`.
@router.get("/units/{unit:path}/events", operation_id="listUnitEvents", openapi_extra=token_doc())
async def list_unit_events(
    request: Request,
    unit: Annotated[str, Path(min_length=1, max_length=256)],
    svc: LedgerDep,
    _: Reader,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> EventPage:
    """One unit's events, newest first."""
    page = await svc.list_events(unit_ref=unit, limit=limit, cursor=cursor)
    unit_logged(request, unit)
    return _page(page.items, page.next_cursor)
