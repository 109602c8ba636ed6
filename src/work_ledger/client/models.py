"""The records the API returns, as frozen dataclasses parsed from its JSON (`_parse.py`:
tolerant of unknown and missing fields), and the units to register or split into."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from work_ledger.client._parse import build, objects
from work_ledger.client.money import ModelCost

T = TypeVar("T")


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
    # DESIGN §12; None from a server that predates it. `parent_id`: the unit it was split
    # from; `unfinished_prerequisites`: how many still hold it.
    parent_id: str | None = None
    unfinished_prerequisites: int | None = None
    max_attempts: int | None = None
    failed_attempts: int | None = None
    attempts_allowed: int | None = None
    # DESIGN §13: its exclusion keys.
    exclusive: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Unit:
        return build(cls, data)


@dataclass(frozen=True, slots=True)
class UnitRef:
    """Another unit as a unit's detail names it: a prerequisite, a child or the parent."""

    id: str
    external_ref: str
    state: str | None = None
    disposition: str | None = None

    @property
    def finished(self) -> bool:
        """Done, or abandoned as not needed after all (DROPPED): no longer holds a dependent."""
        return self.state == "done" or self.disposition == "DROPPED"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnitRef:
        return build(cls, data)


@dataclass(frozen=True, slots=True)
class Waiting:
    """One thing a waiting unit waits on: a prerequisite unit, or the answer to a question."""

    kind: str
    unit: UnitRef | None = None
    question_id: str | None = None

    def describe(self) -> str:
        if self.unit is not None:
            state = self.unit.state or "?"
            if self.unit.disposition:
                state += f" {self.unit.disposition}"
            return f"prerequisite {self.unit.external_ref} ({state})"
        if self.kind == "answer":
            return f"the answer to question {self.question_id}"
        return self.kind

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Waiting:
        unit = data.get("unit")
        question = data.get("question_id")
        return cls(
            str(data.get("kind", "")),
            UnitRef.from_json(unit) if isinstance(unit, dict) else None,
            None if question is None else str(question),
        )


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
    cost_by_model: list[ModelCost] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.outcome is None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        by_model = [ModelCost.from_json(m) for m in objects(data, "cost_by_model")]
        return build(cls, {**data, "cost_by_model": by_model})


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
        return build(cls, data)


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
        return build(cls, data)


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
    """A unit with its attempts and questions, what it waits on, and its place in a split.

    Fields a server before DESIGN §12 does not send stay empty (None for `subtree_cost_cents`).
    """

    unit: Unit
    attempts: list[Attempt]
    questions: list[Question]
    waiting_on: list[Waiting] = field(default_factory=list)
    requires: list[UnitRef] = field(default_factory=list)
    parent: UnitRef | None = None
    children: list[UnitRef] = field(default_factory=list)
    subtree_cost_cents: int | None = None
    # DESIGN §13: why a ready unit is not claimed now ({"kind": "paused"|"cap"|...}).
    held_back_by: list[dict[str, Any]] = field(default_factory=list)

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
        parent = data.get("parent")
        subtree = data.get("subtree_cost_cents")
        return cls(
            Unit.from_json(unit),
            [Attempt.from_json(a) for a in objects(data, "attempts")],
            [Question.from_json(q) for q in objects(data, "questions")],
            [Waiting.from_json(w) for w in objects(data, "waiting_on")],
            [UnitRef.from_json(r) for r in objects(data, "requires")],
            UnitRef.from_json(parent) if isinstance(parent, dict) else None,
            [UnitRef.from_json(c) for c in objects(data, "children")],
            None if subtree is None else int(subtree),
            objects(data, "held_back_by"),
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
    """A unit to register: `requires` names its prerequisites (external_refs or ids of units
    registered earlier or in the same batch); `max_attempts` (1..100) overrides the server's
    WL_MAX_ATTEMPTS."""

    external_ref: str
    fleet: str
    domain: str | None = None
    workflow_id: str | None = None
    requires: tuple[str, ...] = ()
    max_attempts: int | None = None
    exclusive: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"external_ref": self.external_ref, "fleet": self.fleet}
        if self.domain is not None:
            body["domain"] = self.domain
        if self.workflow_id is not None:
            body["workflow_id"] = self.workflow_id
        # Sent only when set: a server before DESIGN §12 refuses unknown fields.
        if self.requires:
            body["requires"] = list(self.requires)
        if self.max_attempts is not None:
            body["max_attempts"] = self.max_attempts
        if self.exclusive:
            body["exclusive"] = list(self.exclusive)
        return body


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child unit of a split: fleet inherited, `domain` defaulting to the parent's, and
    `requires` naming siblings or other units."""

    external_ref: str
    domain: str | None = None
    requires: tuple[str, ...] = ()
    # None: the parent's exclusion keys.
    exclusive: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"external_ref": self.external_ref}
        if self.domain is not None:
            body["domain"] = self.domain
        if self.requires:
            body["requires"] = list(self.requires)
        if self.exclusive is not None:
            body["exclusive"] = list(self.exclusive)
        return body


@dataclass(frozen=True, slots=True)
class Split:
    """A split's answer: the parent (now waiting on its children) and the children made."""

    unit: Unit
    children: list[Registered]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Split:
        children = [Registered(str(c["id"]), c["external_ref"], True) for c in data["children"]]
        return cls(Unit.from_json(data["unit"]), children)


@dataclass(frozen=True, slots=True)
class BulkChange:
    """A unit a bulk run changed (or, dry, would change): its state before and after."""

    id: str
    external_ref: str
    from_state: str
    to_state: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BulkChange:
        return cls(str(data["id"]), data["external_ref"], data["from"], data["to"])


@dataclass(frozen=True, slots=True)
class BulkSkip:
    """A unit a bulk run left as it is: the rule that keeps it, and why, in words."""

    id: str
    external_ref: str
    state: str = ""
    rule: str = ""
    reason: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BulkSkip:
        return build(cls, data)


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk dispose or release did (or, as a dry run, would do); `operation_id`
    names a real run's events (their `detail.bulk.operation`)."""

    dry_run: bool
    matched: int
    changed: list[BulkChange] = field(default_factory=list)
    skipped: list[BulkSkip] = field(default_factory=list)
    operation_id: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BulkResult:
        operation = data.get("operation_id")
        return cls(
            bool(data["dry_run"]),
            int(data["matched"]),
            [BulkChange.from_json(c) for c in objects(data, "changed")],
            [BulkSkip.from_json(s) for s in objects(data, "skipped")],
            None if operation is None else str(operation),
        )
