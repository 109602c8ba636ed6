"""Wire models of the flow controls (DESIGN §13): what POST /controls accepts and what
the controls' reads return (a control event is the service's `ControlEvent` itself)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints
from pydantic import Strict as StrictMark

from work_ledger.api.schemas import Body, Name
from work_ledger.service.controls import ControlEvent


class GateIn(Body):
    max_failed_share: Annotated[float, Field(ge=0, le=1)]
    last_attempts: Annotated[int, StrictMark(), Field(ge=1, le=10000)]


class ControlsIn(Body):
    """A field present changes, a field absent stays; `"max_live": null` removes the cap,
    `"gate": null` the gate."""

    fleet: Name
    domain: Name | None = None
    max_live: Annotated[int, StrictMark(), Field(ge=0, le=100000)] | None = None
    paused: Annotated[bool, StrictMark()] | None = None
    gate: GateIn | None = None
    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    force: Annotated[bool, StrictMark()] = False


class ControlOut(BaseModel):
    fleet: str
    domain: str | None
    max_live: int | None
    live: int
    held: int
    paused: bool
    paused_since: dt.datetime | None
    pause_reason: str | None
    drained: bool
    gate: dict[str, Any] | None
    reason: str
    updated_at: dt.datetime


class ControlPage(BaseModel):
    items: list[ControlOut]


class ControlEventPage(BaseModel):
    items: list[ControlEvent]
    next_cursor: str | None
