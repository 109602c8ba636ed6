"""Problem+json responses back to the exception classes the server raised.

The server renders every `WorkLedgerError` as RFC 9457 problem+json carrying its `code`
(and a `type` URI ending in it); here the code maps back to the same class, so a Python
caller catches exactly what the server raised, with `invariant`, `unit_id`, `state` and
`allowed` filled in. Three classes exist only on the client side:

    InvalidInput
    └── ClientMisconfigured  WL_URL, url=, WL_CA_BUNDLE or ca_bundle= cannot be used
    NotFound
    └── NothingToClaim   no unit is claimable right now (a claim that came back empty)
    Unavailable
    └── Unreachable      no server URL could be reached, even after retries
"""

from __future__ import annotations

import json
from typing import Any

from work_ledger.errors import (
    Forbidden,
    InvalidInput,
    InvariantViolation,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    WorkLedgerError,
    all_error_classes,
)


class NothingToClaim(NotFound):
    code = "nothing_to_claim"
    title = "No claimable unit"


class ClientMisconfigured(InvalidInput):
    code = "client_misconfigured"
    title = "Client misconfigured"


class Unreachable(Unavailable):
    code = "unreachable"
    title = "Server unreachable"


_BY_STATUS: dict[int, type[WorkLedgerError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: InvariantViolation,
    413: PayloadTooLarge,
    422: InvalidInput,
    503: Unavailable,
}

_PROBLEM_FIELDS = ("detail", "invariant", "unit_id", "state", "allowed", "code")


def _code_of(problem: dict[str, Any]) -> str | None:
    code = problem.get("code")
    if isinstance(code, str) and code:
        return code
    kind = problem.get("type")
    if isinstance(kind, str) and kind and kind != "about:blank":
        for sep in ("#", "/", ":"):
            kind = kind.rsplit(sep, 1)[-1]
        return kind or None
    return None


def rule_of(exc: WorkLedgerError) -> str:
    """The rule that refused: the problem's `invariant`, else its code (a newer server's
    code that this SDK maps to the broader class of its status is kept in `extra`)."""
    code = exc.extra.get("code")
    return exc.invariant or (code if isinstance(code, str) else exc.code)


def error_class(code: str | None, status: int) -> type[WorkLedgerError]:
    """The class for a problem's code, else the broadest class for its HTTP status."""
    if code:
        for cls in all_error_classes():
            if cls.code == code:
                return cls
    return _BY_STATUS.get(status, WorkLedgerError)


def error_from_response(status: int, body: bytes) -> WorkLedgerError:
    """A typed exception from a non-2xx response (problem+json, or anything else)."""
    try:
        problem = json.loads(body) if body else {}
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = _code_of(problem)
    cls = error_class(code, status)
    detail = problem.get("detail") or problem.get("title")
    if not isinstance(detail, str) or not detail:
        text = body.decode("utf-8", "replace").strip()[:500]
        detail = f"the server answered HTTP {status}" + (f": {text}" if text else "")
    allowed = problem.get("allowed") or ()
    extra = {k: v for k, v in problem.items() if k not in _PROBLEM_FIELDS}
    extra.setdefault("status", status)
    if code is not None and code != cls.code:
        extra["code"] = code  # a code this SDK has no class for (a newer server's): kept
    return cls(
        detail,
        invariant=problem.get("invariant"),
        unit_id=problem.get("unit_id"),
        state=problem.get("state"),
        allowed=[str(a) for a in allowed] if isinstance(allowed, list) else (),
        extra=extra,
    )
