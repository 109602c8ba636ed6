"""The records the API returns, as frozen dataclasses parsed from its JSON.

Parsing is tolerant: unknown fields are ignored and missing optional ones default, so an
older SDK keeps working against a newer server. Ids are strings, times are aware datetimes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_TIMES = frozenset(
    {
        "created_at",
        "updated_at",
        "disposed_at",
        "lease_expires_at",
        "last_heartbeat_at",
        "started_at",
        "ended_at",
        "closed_at",
        "occurred_at",
    }
)


def _time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def _build(cls: type[T], data: dict[str, Any]) -> T:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name in _TIMES:
            value = _time(value)
        elif f.name.endswith("id") and value is not None and not isinstance(value, int):
            value = str(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def to_json(value: Any) -> Any:
    """Plain JSON-ready data from these records (for `--json` output and MCP replies)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


@dataclass(frozen=True, slots=True)
class Unit:
    id: str
    external_ref: str
    fleet: str = ""
    domain: str = ""
    state: str = ""
    disposition: str | None = None
    disposed_at: dt.datetime | None = None
    workflow_id: str | None = None
    claimed_by: str | None = None
    lease_expires_at: dt.datetime | None = None
    last_heartbeat_at: dt.datetime | None = None
    attempt_count: int = 0
    cost_cents: int = 0
    evidence_urls: list[str] = field(default_factory=list)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Unit:
        return _build(cls, data)


@dataclass(frozen=True, slots=True)
class Attempt:
    id: str
    unit_id: str
    attempt_no: int = 0
    agent_id: str = ""
    started_at: dt.datetime | None = None
    outcome: str | None = None
    cost_cents: int = 0
    evidence_url: str | None = None
    ended_at: dt.datetime | None = None

    @property
    def live(self) -> bool:
        return self.outcome is None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        return _build(cls, data)


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    unit_id: str
    question: str = ""
    status: str = "open"
    answer: str | None = None
    attempt_id: str | None = None
    assignee_group_slug: str = "agent-questions"
    external_task_id: str | None = None
    asked_by: str | None = None
    answered_by: str | None = None
    created_at: dt.datetime | None = None
    closed_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Question:
        return _build(cls, data)


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    unit_id: str
    event_type: str = ""
    attempt_id: str | None = None
    from_state: str | None = None
    to_state: str | None = None
    agent_id: str | None = None
    cost_delta_cents: int = 0
    detail: dict[str, Any] = field(default_factory=dict)
    source_event_id: str | None = None
    created_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return _build(cls, data)


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim's answer: the unit and its live attempt, or both None (nothing claimable)."""

    unit: Unit | None
    attempt: Attempt | None
    resumed: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Claim:
        unit, attempt = data.get("unit"), data.get("attempt")
        return cls(
            None if unit is None else Unit.from_json(unit),
            None if attempt is None else Attempt.from_json(attempt),
            bool(data.get("resumed", False)),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """The unit and its attempt after a heartbeat, transition or cost."""

    unit: Unit
    attempt: Attempt

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        return cls(Unit.from_json(data["unit"]), Attempt.from_json(data["attempt"]))


@dataclass(frozen=True, slots=True)
class Asked:
    """The unit and its question after a block or an unblock."""

    unit: Unit
    question: Question

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Asked:
        return cls(Unit.from_json(data["unit"]), Question.from_json(data["question"]))


@dataclass(frozen=True, slots=True)
class UnitDetail:
    unit: Unit
    attempts: list[Attempt]
    questions: list[Question]

    @property
    def live_attempt(self) -> Attempt | None:
        return next((a for a in self.attempts if a.live), None)

    @property
    def last_attempt(self) -> Attempt | None:
        return max(self.attempts, key=lambda a: a.attempt_no, default=None)

    @property
    def open_question(self) -> Question | None:
        return next((q for q in self.questions if q.status == "open"), None)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnitDetail:
        unit = data["unit"] if isinstance(data.get("unit"), dict) else data
        return cls(
            Unit.from_json(unit),
            [Attempt.from_json(a) for a in data.get("attempts") or []],
            [Question.from_json(q) for q in data.get("questions") or []],
        )


@dataclass(frozen=True, slots=True)
class Registered:
    id: str
    external_ref: str
    created: bool


@dataclass(frozen=True, slots=True)
class Registration:
    created: int
    existing: int
    units: list[Registered]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Registration:
        units = [Registered(str(u["id"]), u["external_ref"], u["created"]) for u in data["units"]]
        return cls(int(data["created"]), int(data["existing"]), units)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class NewUnit:
    """A unit to register."""

    external_ref: str
    fleet: str
    domain: str | None = None
    workflow_id: str | None = None

    def to_json(self) -> dict[str, str]:
        body = {"external_ref": self.external_ref, "fleet": self.fleet}
        if self.domain is not None:
            body["domain"] = self.domain
        if self.workflow_id is not None:
            body["workflow_id"] = self.workflow_id
        return body
