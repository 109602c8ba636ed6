"""The input rules and refusals of DESIGN §12 (prerequisites, splits, attempt limits,
budgets, cost records), worded for an agent to act on. Pure: no I/O.

The database enforces every rule again (migration 0011); these catch bad input before
a round trip and say exactly which entry broke which rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from work_ledger.domain.model import NEXT_ACTIONS, State, Unit
from work_ledger.errors import (
    AttemptLimitReached,
    BudgetExhausted,
    InvalidInput,
    PrerequisiteCycle,
    PrerequisitesUnfinished,
    UnknownPrerequisite,
)

MAX_REQUIRES = 50
MAX_CHILDREN = 100
MAX_ATTEMPTS_BOUND = 100
MAX_MODEL_LENGTH = 128
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass(frozen=True, slots=True)
class Requirements:
    """Requirement edges as the SQL takes them: parallel arrays of the requiring unit's ref,
    the prerequisite as sent (ref or id), and that as a uuid when it is one."""

    dependents: list[str]
    keys: list[str]
    key_ids: list[uuid.UUID | None]


@dataclass(frozen=True, slots=True)
class CostRecord:
    """One cost record: cents, and optionally the model and tokens behind them."""

    cost_cents: int
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    estimated: bool = False
    # A session's totals for its model that include what telemetry reported (DESIGN §13):
    # only what they add above it is recorded.
    includes_telemetry: bool = False


def requirements(edges: Sequence[tuple[str, Sequence[str]]]) -> Requirements:
    """The edges of (unit ref, its requires): at most MAX_REQUIRES each, none on itself,
    each sent once."""
    dependents: list[str] = []
    keys: list[str] = []
    key_ids: list[uuid.UUID | None] = []
    for ref, requires in edges:
        if len(requires) > MAX_REQUIRES:
            raise InvalidInput(
                f"unit {ref} lists {len(requires)} prerequisites; at most {MAX_REQUIRES}"
            )
        for key in dict.fromkeys(requires):
            if key == ref:
                raise PrerequisiteCycle(
                    f"unit {ref} requires itself; a unit cannot require itself, drop it",
                    invariant="prerequisite_cycle",
                    extra={"units": [ref]},
                )
            dependents.append(ref)
            keys.append(key)
            key_ids.append(_as_uuid(key))
    return Requirements(dependents, keys, key_ids)


def _as_uuid(key: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(key)
    except ValueError:
        return None


def max_attempts(value: int | None, default: int) -> int:
    chosen = default if value is None else value
    if isinstance(chosen, bool) or not 1 <= chosen <= MAX_ATTEMPTS_BOUND:
        raise InvalidInput(
            f"max_attempts must be a whole number 1..{MAX_ATTEMPTS_BOUND}, not {chosen!r}"
        )
    return chosen


def check_cost_record(record: CostRecord) -> None:
    if record.cost_cents < 0:
        raise InvalidInput(
            f"cost_cents must be zero or a positive whole number of cents, not {record.cost_cents}"
        )
    for field in TOKEN_FIELDS:
        value = getattr(record, field)
        if value is not None and value < 0:
            raise InvalidInput(f"{field} must be zero or a positive whole number, not {value}")
    if record.model is not None and not 1 <= len(record.model) <= MAX_MODEL_LENGTH:
        raise InvalidInput(f"model must be 1..{MAX_MODEL_LENGTH} characters")
    if record.cost_cents == 0 and not any(getattr(record, f) for f in TOKEN_FIELDS):
        raise InvalidInput(
            "this cost record has nothing in it: send a positive cost_cents, or tokens "
            "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)",
            invariant="cost_record_not_empty",
        )


def unknown_prerequisites(keys: Sequence[str]) -> UnknownPrerequisite:
    shown = ", ".join(repr(k) for k in keys[:20])
    return UnknownPrerequisite(
        f"no unit is registered as {shown}, and none is in this request; register the "
        "prerequisites first (or in the same batch), then send this again. Nothing was written.",
        invariant="unknown_prerequisite",
        extra={"unknown": list(keys)},
    )


def cycle(detail: str) -> PrerequisiteCycle:
    units = detail.split(": ", 1)[-1].split(";")[0].split(" -> ")
    return PrerequisiteCycle(
        f"{detail}. Nothing was written: drop one of these requirements and send it again.",
        invariant="prerequisite_cycle",
        extra={"units": list(dict.fromkeys(u.strip() for u in units if u.strip()))},
    )


def prerequisites_unfinished(
    unit: Unit, waiting_on: list[dict[str, Any]]
) -> PrerequisitesUnfinished:
    names = [
        f"{w['unit']['external_ref']} ({w['unit']['disposition'] or w['unit']['state']})"
        for w in waiting_on
        if w["kind"] == "prerequisite"
    ]
    stuck = any(
        w["kind"] == "prerequisite" and w["unit"]["disposition"] in ("DEAD", "DEFERRED")
        for w in waiting_on
    )
    then = (
        " A DEAD or DEFERRED prerequisite never finishes: an operator waives it "
        "(POST /units/{unit}/waive) or disposes this unit."
        if stuck
        else " It becomes ready by itself when they finish."
    )
    return PrerequisitesUnfinished(
        f"unit {unit.external_ref} is waiting on unfinished prerequisites: "
        f"{', '.join(names) or 'none'}.{then} Claim another unit.",
        invariant="prerequisites_unfinished",
        unit_id=str(unit.id),
        state=unit.state,
        allowed=NEXT_ACTIONS[unit.state],
        extra={"waiting_on": waiting_on},
    )


def attempt_limit_reached(unit: Unit, waiting_on: list[dict[str, Any]]) -> AttemptLimitReached:
    return AttemptLimitReached(
        f"unit {unit.external_ref} has failed {unit.failed_attempts} of its "
        f"{unit.attempts_allowed} allowed attempts; the ledger parked it and asked whether to "
        "go on. It is claimed again only once a person answers (POST /units/{unit}/unblock). "
        "Claim another unit.",
        invariant="attempt_limit_reached",
        unit_id=str(unit.id),
        state=State.WAITING,
        allowed=NEXT_ACTIONS[State.WAITING],
        extra={
            "waiting_on": waiting_on,
            "failed_attempts": unit.failed_attempts,
            "attempts_allowed": unit.attempts_allowed,
        },
    )


def budget_exhausted(unit: Unit, budget: dict[str, Any]) -> BudgetExhausted:
    scope = (
        f"fleet {budget['fleet']}"
        if budget["domain"] is None
        else f"fleet {budget['fleet']}, domain {budget['domain']}"
    )
    return BudgetExhausted(
        f"the budget of {scope} is spent ({budget['spent_cents']} of {budget['cap_cents']} "
        f"cents), so unit {unit.external_ref} is not claimed. Do not retry: stop, or claim "
        "in another scope; an operator raises the cap with POST /budgets.",
        invariant="budget_exhausted",
        unit_id=str(unit.id),
        state=unit.state,
        allowed=NEXT_ACTIONS[unit.state],
        extra={**budget, "budget": budget},
    )
