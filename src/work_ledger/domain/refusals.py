"""Why a write was refused, in words an agent can act on. Pure: no I/O.

The service looks once at the unit after a guarded statement wrote nothing; these build
the error from what it saw: the rule's name, the unit's state, and the next allowed steps.
"""

from __future__ import annotations

import datetime as dt
from typing import TypeVar

from work_ledger.domain.model import HELD, NEXT_ACTIONS, Attempt, Outcome, State, Unit
from work_ledger.errors import (
    AttemptSuperseded,
    InvariantViolation,
    NotFound,
    NotHolder,
    WorkLedgerError,
)

E = TypeVar("E", bound=WorkLedgerError)


def _z(moment: dt.datetime | None) -> str:
    return "never" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _allowed(state: State) -> str:
    actions = NEXT_ACTIONS[state]
    return ", ".join(actions) if actions else "nothing (the unit is closed for good)"


def _about(cls: type[E], unit: Unit, detail: str, invariant: str | None = None) -> E:
    """The error, carrying the unit, its state and what is allowed from it."""
    return cls(
        detail,
        invariant=invariant,
        unit_id=str(unit.id),
        state=unit.state,
        allowed=NEXT_ACTIONS[unit.state],
    )


def wrong_state(unit: Unit, action: str, leaving: list[State]) -> InvariantViolation:
    needs = " or ".join(leaving) or "no state"
    detail = (
        f"unit {unit.external_ref} is {unit.state}; {action} needs it {needs}. "
        f"Allowed from {unit.state}: {_allowed(unit.state)}."
    )
    return _about(InvariantViolation, unit, detail, "unit_state_transition_allowed")


def superseded(unit: Unit, attempt: Attempt) -> AttemptSuperseded:
    why = (
        f"was superseded: the lease lapsed and {unit.claimed_by or 'another agent'} "
        f"reclaimed the unit as attempt {unit.attempt_count}"
        if attempt.outcome is Outcome.SUPERSEDED
        else f"has ended ({attempt.outcome})"
    )
    detail = (
        f"attempt {attempt.attempt_no} of unit {unit.external_ref} {why}. Your claim is "
        "lost: stop working on this unit and do not retry; claim another unit."
    )
    return _about(AttemptSuperseded, unit, detail, "attempt_superseded")


def not_holder(agent: str, action: str, unit: Unit, holder: str | None) -> NotHolder:
    where = (
        f"it is held by {holder} ({unit.state})"
        if unit.state in HELD
        else f"it is {unit.state} and not held by you"
    )
    detail = (
        f"{agent} cannot {action} unit {unit.external_ref}: {where}. Work only on the unit "
        "your own claim returned; claim another unit."
    )
    return _about(NotHolder, unit, detail)


def attempt_not_yours(agent: str, action: str, unit: Unit, attempt: Attempt) -> NotHolder:
    detail = (
        f"attempt {attempt.attempt_no} of unit {unit.external_ref} belongs to "
        f"{attempt.agent_id}, not {agent}; you cannot {action} it"
    )
    return _about(NotHolder, unit, detail)


def claim_refused(unit: Unit, agent: str, other: Unit | None) -> InvariantViolation:
    """A named claim wrote nothing; `other` is a different unit `agent` already holds."""
    if other is not None:
        detail = (
            f"{agent} already holds unit {other.external_ref} ({other.state}); an agent holds "
            f"one live claim at a time. Finish, block or release {other.external_ref} "
            f"before claiming {unit.external_ref}."
        )
        return _about(InvariantViolation, unit, detail, "one_live_claim_per_agent")
    if unit.state in HELD:
        until = (
            f"until {_z(unit.lease_expires_at)}"
            if unit.lease_expires_at
            else "while its question is open"
        )
        detail = (
            f"unit {unit.external_ref} is held by {unit.claimed_by} ({unit.state}) {until}; "
            "claim another unit, or wait for the lease to lapse"
        )
        return _about(InvariantViolation, unit, detail, "unit_claimed_only_when_claimable")
    if unit.state is State.READY:
        # Ready, yet the claim skipped it: another claim had the row locked just then.
        detail = (
            f"unit {unit.external_ref} is being claimed by another agent at this moment; "
            "claim another unit"
        )
        return _about(InvariantViolation, unit, detail, "unit_claimed_only_when_claimable")
    return wrong_state(unit, "claim", [State.READY])


def holder_busy(unit: Unit) -> InvariantViolation:
    detail = (
        f"unit {unit.external_ref} stays blocked: its holder {unit.claimed_by} has since "
        "claimed another unit, and an agent holds one live claim at a time. The holder must "
        "release or finish that unit first, or an operator can dispose this one DEFERRED."
    )
    return _about(InvariantViolation, unit, detail, "one_live_claim_per_agent")


def not_the_open_question(unit: Unit, question_id: object) -> NotFound:
    detail = (
        f"question {question_id} is not the open question of unit {unit.external_ref}; "
        "GET /questions?status=open lists the open ones"
    )
    return _about(NotFound, unit, detail)
