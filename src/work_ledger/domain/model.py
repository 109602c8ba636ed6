"""The vocabulary of the ledger: states, dispositions, the allowed map, and its records.

Pure: no I/O. The database enforces the same map (`wl_next_states` in migration 0002);
a test checks that the two agree.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

T = TypeVar("T")


class State(StrEnum):
    READY = "ready"
    WAITING = "waiting"
    CLAIMED = "claimed"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    VERIFIED = "verified"
    DONE = "done"
    ABANDONED = "abandoned"


class Disposition(StrEnum):
    MIGRATED = "MIGRATED"
    DROPPED = "DROPPED"
    DEFERRED = "DEFERRED"
    DEAD = "DEAD"


class Outcome(StrEnum):
    VERIFIED = "verified"
    BLOCKED = "blocked"
    FAILED = "failed"
    ABANDONED = "abandoned"
    SUPERSEDED = "superseded"
    SPLIT = "split"


class QuestionStatus(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    CANCELLED = "cancelled"


# DESIGN §4 and §12. claimed → claimed and in_progress → claimed are the stale reclaim;
# → waiting is the attempt limit (and, from in_progress, a split).
TRANSITIONS: dict[State, frozenset[State]] = {
    State.READY: frozenset({State.CLAIMED, State.ABANDONED}),
    State.WAITING: frozenset({State.READY, State.ABANDONED}),
    State.CLAIMED: frozenset({State.IN_PROGRESS, State.READY, State.CLAIMED, State.WAITING}),
    State.IN_PROGRESS: frozenset(
        {
            State.READY,
            State.CLAIMED,
            State.BLOCKED,
            State.VERIFIED,
            State.ABANDONED,
            State.WAITING,
        }
    ),
    State.BLOCKED: frozenset({State.IN_PROGRESS, State.ABANDONED}),
    State.VERIFIED: frozenset({State.DONE}),
    State.DONE: frozenset(),
    State.ABANDONED: frozenset(),
}

# Which dispositions may close a unit from each state.
DISPOSITIONS_FROM: dict[State, frozenset[Disposition]] = {
    State.READY: frozenset({Disposition.DROPPED, Disposition.DEFERRED, Disposition.DEAD}),
    State.WAITING: frozenset({Disposition.DROPPED, Disposition.DEFERRED, Disposition.DEAD}),
    State.IN_PROGRESS: frozenset({Disposition.DROPPED, Disposition.DEAD}),
    State.BLOCKED: frozenset({Disposition.DEFERRED, Disposition.DEAD}),
    State.VERIFIED: frozenset({Disposition.MIGRATED}),
}

TERMINAL = frozenset({State.DONE, State.ABANDONED})
LEASED = frozenset({State.CLAIMED, State.IN_PROGRESS})
HELD = frozenset({State.CLAIMED, State.IN_PROGRESS, State.BLOCKED})

# The next actions a caller may take from each state, as an agent reads them.
NEXT_ACTIONS: dict[State, tuple[str, ...]] = {
    State.READY: ("claim", "dispose DROPPED|DEFERRED|DEAD (operator)"),
    State.WAITING: (
        "wait for its prerequisites (GET /units/{unit} waiting_on)",
        "waive a prerequisite (operator)",
        "unblock (answer the ledger's question)",
        "dispose DROPPED|DEFERRED|DEAD (operator)",
    ),
    State.CLAIMED: ("start", "heartbeat", "release", "cost"),
    State.IN_PROGRESS: ("heartbeat", "cost", "block", "verify", "release", "dispose DROPPED|DEAD"),
    State.BLOCKED: ("unblock (answer)", "cancel question", "dispose DEFERRED|DEAD", "cost"),
    State.VERIFIED: ("dispose MIGRATED", "cost"),
    State.DONE: (),
    State.ABANDONED: (),
}


def dispositions_allowed_from(state: State) -> frozenset[Disposition]:
    return DISPOSITIONS_FROM.get(state, frozenset())


def states_disposable_as(disposition: Disposition) -> list[State]:
    return [s for s, allowed in DISPOSITIONS_FROM.items() if disposition in allowed]


def _from_record(cls: type[Any], record: Any) -> Any:
    """By name: for rows of any shape."""
    return cls(**{name: record[name] for name in cls.__dataclass_fields__})


# Unit, Attempt and Question are read from their table's row values (`u AS unit`, arrays of
# them), whose fields come in the table's column order. Each dataclass declares its fields
# in that order (tests/db/test_schema.py checks), so it is built by position: half the
# cost of by name, on every write's answer. It takes the row's first fields only: a column
# that the next release adds comes last (ALTER TABLE ADD COLUMN appends), and this release
# must keep serving while that release rolls out (docs/postgresql.md, expand/contract).
_STATES = {state.value: state for state in State}
_DISPOSITIONS = {disposition.value: disposition for disposition in Disposition}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_QUESTION_STATUSES = {status.value: status for status in QuestionStatus}


@dataclass(frozen=True, slots=True)
class Unit:
    id: uuid.UUID
    created_at: dt.datetime
    updated_at: dt.datetime
    external_ref: str
    fleet: str
    domain: str
    state: State
    disposition: Disposition | None
    disposed_at: dt.datetime | None
    workflow_id: str | None
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    last_heartbeat_at: dt.datetime | None
    attempt_count: int
    cost_cents: int
    evidence_urls: list[str]
    parent_id: uuid.UUID | None
    max_attempts: int
    attempts_allowed: int
    failed_attempts: int
    unfinished_prerequisites: int
    # Its exclusion keys (DESIGN §13), sorted; [] for none (the column holds null).
    exclusive: list[str]

    @classmethod
    def from_record(cls, record: Any) -> Unit:
        # The columns after these are the database's own (in_paused_scope, 0032).
        unit = cls(*record[:_UNIT_FIELDS])
        object.__setattr__(unit, "state", _STATES[unit.state])
        if unit.disposition is not None:
            object.__setattr__(unit, "disposition", _DISPOSITIONS[unit.disposition])
        if unit.exclusive is None:
            object.__setattr__(unit, "exclusive", [])
        return unit


_UNIT_FIELDS = len(Unit.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Attempt:
    id: uuid.UUID
    unit_id: uuid.UUID
    attempt_no: int
    agent_id: str
    started_at: dt.datetime
    outcome: Outcome | None
    cost_cents: int
    evidence_url: str | None
    ended_at: dt.datetime | None

    @property
    def live(self) -> bool:
        return self.outcome is None

    @classmethod
    def from_record(cls, record: Any) -> Attempt:
        attempt = cls(*record[:_ATTEMPT_FIELDS])
        if attempt.outcome is not None:
            object.__setattr__(attempt, "outcome", _OUTCOMES[attempt.outcome])
        return attempt


_ATTEMPT_FIELDS = len(Attempt.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Question:
    id: uuid.UUID
    unit_id: uuid.UUID
    attempt_id: uuid.UUID | None
    question: str
    status: QuestionStatus
    answer: str | None
    assignee_group_slug: str
    external_task_id: str | None
    asked_by: str | None
    answered_by: str | None
    created_at: dt.datetime
    closed_at: dt.datetime | None

    @classmethod
    def from_record(cls, record: Any) -> Question:
        question = cls(*record[:_QUESTION_FIELDS])
        object.__setattr__(question, "status", _QUESTION_STATUSES[question.status])
        return question


_QUESTION_FIELDS = len(Question.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    unit_id: uuid.UUID
    attempt_id: uuid.UUID | None
    event_type: str
    from_state: State | None
    to_state: State | None
    agent_id: str | None
    cost_delta_cents: int
    detail: dict[str, Any]
    source_event_id: str | None
    created_at: dt.datetime

    @classmethod
    def from_record(cls, record: Any) -> Event:
        event: Event = _from_record(cls, record)
        for name in ("from_state", "to_state"):
            value = getattr(event, name)
            if value is not None:
                object.__setattr__(event, name, _STATES[value])
        return event


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: a unit and its live attempt, or nothing claimable."""

    # It is the wire's answer too (api/answers.py): `resumed` is always sent, so its JSON
    # schema (pydantic's, which reads this) lists it as required despite its default.
    __pydantic_config__: ClassVar[dict[str, bool]] = {
        "json_schema_serialization_defaults_required": True
    }

    unit: Unit | None
    attempt: Attempt | None
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class UnitDetail:
    unit: Unit
    attempts: list[Attempt]
    questions: list[Question]


@dataclass(frozen=True, slots=True)
class Registered:
    id: uuid.UUID
    external_ref: str
    created: bool


@dataclass(frozen=True, slots=True)
class NewUnit:
    external_ref: str
    fleet: str
    domain: str | None = None
    workflow_id: str | None = None
    requires: tuple[str, ...] = ()
    max_attempts: int | None = None
    exclusive: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts. An unprivileged actor (an agent) may only write to units it holds."""

    name: str
    privileged: bool = False

    @property
    def holder(self) -> str | None:
        """The holder the SQL guards check, or None when any holder is acceptable."""
        return None if self.privileged else self.name


@dataclass(frozen=True, slots=True)
class Violation:
    unit_id: uuid.UUID | None  # None: a kept summary of the read side, not one unit
    external_ref: str
    rule: str
    detail: str
