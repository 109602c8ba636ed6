"""What the API answers: each answer's type, declared once.

The ledger's own records (`Unit`, `Attempt`, `Question`, `Event`, `Claim`, `Registered`
in domain/model.py; `Budget` and `ControlEvent` of the service) are their own wire
objects: a route names the type as its `response_model`, which documents it, and
`wire.answer` encodes an instance of it, straight to bytes. The types here only compose
them (a unit and its attempt, a page of units) or carry what a read adds to them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from work_ledger.domain.model import Attempt, Disposition, Event, Question, Registered, State, Unit
from work_ledger.service.budgets import Budget

# -- the writes' answers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnitAttempt:
    """A unit and its attempt: the answer of a claim, a start, a verify, a release, a
    heartbeat and a cost."""

    unit: Unit
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class UnitQuestion:
    """A unit and its question: the answer of a block and an unblock."""

    unit: Unit
    question: Question


@dataclass(frozen=True, slots=True)
class UnitOnly:
    """A unit alone: the answer of a dispose and a waive."""

    unit: Unit


class RegisterOut(BaseModel):
    created: int
    existing: int
    units: list[Registered]


class UnitRefOut(BaseModel):
    id: uuid.UUID
    external_ref: str


class SplitOut(BaseModel):
    unit: Unit
    children: list[UnitRefOut]


# -- one unit, in full (GET /units/{unit}) -----------------------------------------------


class ModelCostOut(BaseModel):
    model: str | None
    cost_cents: int
    estimated_cents: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@dataclass(frozen=True, slots=True)
class AttemptDetailOut(Attempt):
    """An attempt with its cost by model."""

    cost_by_model: list[ModelCostOut]


class UnitStateOut(UnitRefOut):
    state: State
    disposition: Disposition | None


@dataclass(frozen=True, slots=True)
class UnitDetailOut(Unit):
    """A unit's fields, then its attempts, questions and place in the work's shape."""

    attempts: list[AttemptDetailOut]
    questions: list[Question]
    waiting_on: Annotated[
        list[dict[str, Any]],
        Field(
            description='What holds a waiting unit: {"kind": "prerequisite", "unit": {...}} or '
            '{"kind": "answer", "question_id"}; [] when the unit is not waiting.'
        ),
    ]
    requires: list[UnitStateOut]
    parent: UnitRefOut | None
    children: list[UnitStateOut]
    subtree_cost_cents: int
    held_back_by: Annotated[
        list[dict[str, Any]],
        Field(
            description="Why a ready unit is skipped by a claim now, one object per reason: "
            '{"kind": "paused"|"cap"|"budget"|"exclusive", ...}; [] otherwise.'
        ),
    ]


# -- pages -----------------------------------------------------------------------------------


class UnitPage(BaseModel):
    items: list[Unit]
    next_cursor: str | None


class EventPage(BaseModel):
    items: list[Event]
    next_cursor: str | None


class QuestionPage(BaseModel):
    items: list[Question]
    next_cursor: str | None


class BudgetPage(BaseModel):
    items: list[Budget]


class Health(BaseModel):
    status: Literal["ok"]
