"""The fleet's flow controls (DESIGN §13): caps, pause, the ramp gate, and their history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from work_ledger.api import problems
from work_ledger.api.auth import Caller, require, token_doc
from work_ledger.api.flow_schemas import ControlEventPage, ControlOut, ControlPage, ControlsIn
from work_ledger.api.request_state import ledger
from work_ledger.api.schemas import MAX_LIMIT
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.domain.flow import ABSENT, ControlChange
from work_ledger.service.keyed import Keying
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

router = APIRouter(tags=["controls"])
LedgerDep = Annotated[Ledger, Depends(ledger)]
# Agents obey the controls; they do not read the operator's panel.
NotAgent = Annotated[Caller, Depends(require(*(r for r in Role if r is not Role.AGENT)))]


def change_of(body: ControlsIn) -> ControlChange:
    """The change a body asks for: a field it sent changes, a field it left out stays."""
    sent = body.model_fields_set

    def field(name: str, value: Any) -> Any:
        return value if name in sent else ABSENT

    paused = body.paused if "paused" in sent and body.paused is not None else ABSENT
    return ControlChange(
        body.fleet,
        body.reason,
        body.domain,
        max_live=field("max_live", body.max_live),
        paused=paused,
        gate=field("gate", None if body.gate is None else body.gate.model_dump()),
        force=body.force,
    )


SET_CONTROLS = WriteOf(ControlsIn)


@router.post(
    "/controls",
    operation_id="setControls",
    responses=problems.WRITE_RESPONSES,
    response_model=ControlOut,
    openapi_extra=SET_CONTROLS.doc(),
)
async def set_controls(request: Request) -> Response:
    """Upsert the controls of a fleet (no domain) or of one domain of it (operator): a
    cap on live units (`max_live`, null removes it), a pause, a ramp gate. `reason` is
    required and kept in the control events. Raising a gated cap is refused (409
    `ramp_gate_closed`) unless the gate's figures allow it or `force` is true."""
    w = await SET_CONTROLS(request)

    def control_out(control: dict[str, Any]) -> Response:
        return answer(ControlOut.model_validate(control))

    change = change_of(w.body)
    return await w.run(
        Keying.ATOMIC, lambda svc: svc.set_controls(change, w.caller.actor()), control_out
    )


@router.get(
    "/controls",
    operation_id="listControls",
    responses=problems.READ_RESPONSES,
    openapi_extra=token_doc(),
)
async def list_controls(svc: LedgerDep, _: NotAgent) -> ControlPage:
    """Every controlled scope: its cap and live units, held units, pause, drain and gate."""
    return ControlPage.model_validate({"items": await svc.list_controls()})


@router.get(
    "/controls/events",
    operation_id="listControlEvents",
    responses=problems.READ_RESPONSES,
    openapi_extra=token_doc(),
)
async def list_control_events(
    svc: LedgerDep,
    _: NotAgent,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: str | None = None,
) -> ControlEventPage:
    """Every change of the controls, newest first; pass `next_cursor` back as `cursor`."""
    page = await svc.list_control_events(limit=limit, cursor=cursor)
    return ControlEventPage(items=page.items, next_cursor=page.next_cursor)
