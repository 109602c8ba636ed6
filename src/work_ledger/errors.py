"""The one exception tree of work-ledger. Imports nothing from the package.

Every error has a snake_case `code` and an HTTP `status`; the API renders it as RFC 9457
problem+json and the SDK maps `code` back to the same class. `detail` is written for the
reader that acts on it, often an LLM agent: what was refused, why, and what to do instead.

    WorkLedgerError
    ├── InvalidInput            422 malformed or out-of-bounds input
    │   ├── IdempotencyKeyReused 422 same Idempotency-Key, different request
    │   ├── UnknownPrerequisite 422 a `requires` entry names no unit
    │   └── PrerequisiteCycle   422 the requirements would make a cycle
    ├── Unauthorized            401 missing, unknown or revoked token
    ├── Forbidden               403 the token's role may not do this
    │   └── NotHolder           403 the unit is held by another agent
    ├── NotFound                404 unknown unit, attempt or question
    ├── InvariantViolation      409 a ledger rule refused the change (names `invariant`)
    │   ├── AttemptSuperseded   409 the attempt written against is no longer live
    │   ├── PrerequisitesUnfinished 409 a waiting unit cannot be claimed yet
    │   ├── AttemptLimitReached 409 the unit used its allowed attempts
    │   ├── BudgetExhausted     409 the fleet's (or domain's) budget is spent
    │   ├── CapReached          409 the scope's live units are at its max_live
    │   ├── ScopePaused         409 the scope is paused: no new claims in it
    │   ├── ExclusiveKeyHeld    409 another unit holds one of the unit's exclusion keys
    │   ├── RampGateClosed      409 the ramp gate refuses raising the cap
    │   └── ExternalRefTaken    409 a split's child ref is already registered
    ├── PayloadTooLarge         413
    ├── RateLimited             429 too many failed authentications (Retry-After)
    └── Unavailable             503 the database cannot be reached
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class WorkLedgerError(Exception):
    code: ClassVar[str] = "work_ledger_error"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Work ledger error"

    def __init__(
        self,
        detail: str,
        *,
        invariant: str | None = None,
        unit_id: str | None = None,
        state: str | None = None,
        allowed: Sequence[str] = (),
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.invariant = invariant
        self.unit_id = unit_id
        self.state = state
        self.allowed = list(allowed)
        self.extra = extra or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class InvalidInput(WorkLedgerError):
    code = "invalid_input"
    status = 422
    title = "Invalid input"


class IdempotencyKeyReused(InvalidInput):
    code = "idempotency_key_reused"
    title = "Idempotency-Key reused with a different request"


class Unauthorized(WorkLedgerError):
    code = "unauthorized"
    status = 401
    title = "Missing or unknown token"


class Forbidden(WorkLedgerError):
    code = "forbidden"
    status = 403
    title = "Not allowed for this token"


class NotHolder(Forbidden):
    code = "not_holder"
    title = "The unit is not held by this agent"


class NotFound(WorkLedgerError):
    code = "not_found"
    status = 404
    title = "Not found"


class InvariantViolation(WorkLedgerError):
    code = "invariant_violation"
    status = 409
    title = "Refused by a ledger invariant"


class AttemptSuperseded(InvariantViolation):
    code = "attempt_superseded"
    title = "The attempt is no longer live"


class UnknownPrerequisite(InvalidInput):
    code = "unknown_prerequisite"
    title = "Unknown prerequisite"


class PrerequisiteCycle(InvalidInput):
    code = "prerequisite_cycle"
    title = "The requirements would make a cycle"


class PrerequisitesUnfinished(InvariantViolation):
    code = "prerequisites_unfinished"
    title = "The unit waits on unfinished prerequisites"


class AttemptLimitReached(InvariantViolation):
    code = "attempt_limit_reached"
    title = "The unit used its allowed attempts"


class BudgetExhausted(InvariantViolation):
    code = "budget_exhausted"
    title = "The budget of this scope is spent"


class CapReached(InvariantViolation):
    code = "cap_reached"
    title = "The scope is at its cap of live units"


class ScopePaused(InvariantViolation):
    code = "paused"
    title = "The scope is paused"


class ExclusiveKeyHeld(InvariantViolation):
    code = "exclusive_key_held"
    title = "Another unit holds one of this unit's exclusion keys"


class RampGateClosed(InvariantViolation):
    code = "ramp_gate_closed"
    title = "The ramp gate refuses raising the cap"


class ExternalRefTaken(InvariantViolation):
    code = "external_ref_taken"
    title = "The external_ref is already registered"


class MalformedBody(WorkLedgerError):
    """A body that cannot be decoded at all (OTLP/HTTP answers 400 for it, §13)."""

    code = "malformed_body"
    status = 400
    title = "Malformed request body"


class PayloadTooLarge(WorkLedgerError):
    code = "payload_too_large"
    status = 413
    title = "Request body too large"


class RateLimited(WorkLedgerError):
    code = "rate_limited"
    status = 429
    title = "Too many failed authentications"


class Unavailable(WorkLedgerError):
    code = "unavailable"
    status = 503
    title = "Database unavailable"


def all_error_classes() -> list[type[WorkLedgerError]]:
    """Every class of the tree, root first (the SDK maps codes back with it)."""
    found: list[type[WorkLedgerError]] = [WorkLedgerError]
    for cls in found:
        found.extend(cls.__subclasses__())
    return found
