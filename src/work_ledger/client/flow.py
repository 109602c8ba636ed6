"""The fleet's flow controls as the API returns them (DESIGN §13): a scope's controls and
the history of their changes."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from work_ledger.client._parse import build


@dataclass(frozen=True, slots=True)
class Control:
    """The controls of a fleet (domain None) or of one domain of it, with its counts now."""

    fleet: str
    domain: str | None = None
    max_live: int | None = None
    live: int = 0
    held: int = 0
    paused: bool = False
    paused_since: dt.datetime | None = None
    pause_reason: str | None = None
    drained: bool = False
    gate: dict[str, Any] | None = None
    reason: str | None = None
    updated_at: dt.datetime | None = None

    @property
    def scope(self) -> str:
        return self.fleet if self.domain is None else f"{self.fleet}/{self.domain}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Control:
        return build(cls, data)


@dataclass(frozen=True, slots=True)
class ControlEvent:
    """One change of a scope's controls: who, the fields before and after, and why."""

    id: int
    fleet: str
    domain: str | None = None
    actor: str = ""
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    reason: str = ""
    forced: bool = False
    gate_figures: dict[str, Any] | None = None
    created_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControlEvent:
        return build(cls, data)
