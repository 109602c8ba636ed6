"""RFC 9457 problem+json: every error the API returns, rendered in one place.

A problem carries `type`, `title`, `status`, `detail` and the ledger's `code`; a refusal
by a ledger rule (409) also names the `invariant`, the `unit_id`, its current `state` and
the actions `allowed` next. `detail` is written for the agent that reads it: what was
refused, why, and what to do instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from work_ledger.errors import WorkLedgerError, all_error_classes

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "urn:work-ledger:problem:"
# The 409 that means "the first request under this key still runs": retry, not a refusal.
IN_FLIGHT = "idempotency_key_in_flight"
RETRY_AFTER_SECONDS = 1
log = structlog.get_logger("work_ledger.api")


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="A URI naming the kind of problem: urn:work-ledger:problem:<code>"
    )
    title: str
    status: int
    detail: str = Field(description="What was refused, why, and what to do instead.")
    code: str = Field(description="The ledger's error code (snake_case).")
    invariant: str | None = Field(None, description="The ledger rule that refused the request.")
    unit_id: str | None = None
    state: str | None = Field(None, description="The unit's current state.")
    allowed: list[str] | None = Field(None, description="The actions allowed next.")
    errors: list[dict[str, Any]] | None = Field(None, description="Each invalid field (422).")


def problem_body(status: int, code: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    body.update(extra)
    return body


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    return JSONResponse(
        problem_body(status, code, title, detail, **extra),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


def error_response(exc: WorkLedgerError) -> JSONResponse:
    extra: dict[str, Any] = dict(exc.extra)
    if exc.status == 409 or exc.invariant is not None:
        # A refusal always names the rule, the unit, its state and what is allowed next
        # (null when it concerns no single unit).
        extra.update(invariant=exc.invariant, unit_id=exc.unit_id, state=exc.state)
        extra["allowed"] = list(exc.allowed)
    elif exc.unit_id is not None:
        extra.update(unit_id=exc.unit_id, state=exc.state, allowed=list(exc.allowed))
    headers = None
    if exc.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif exc.status == 429:
        headers = {"Retry-After": str(exc.extra.get("retry_after", 1))}
    elif exc.status == 503 or exc.invariant == IN_FLIGHT:
        # The two answers a client should retry as they are (same Idempotency-Key): say
        # when, so that a generated client's retry loop needs no guess of its own.
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return problem_response(exc.status, exc.code, exc.title, exc.detail, headers=headers, **extra)


def _where(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "request"


def validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = [
        {
            "loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]
    if any(e["type"] == "json_invalid" for e in errors):
        detail = (
            "the request body is not valid JSON; send a JSON object "
            "with Content-Type: application/json"
        )
    else:
        shown = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in errors[:10])
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        detail = (
            f"the request is invalid: {shown}{more}. Fix these fields and send it again; "
            "unknown fields are refused, see /openapi.json"
        )
    return problem_response(422, "invalid_input", "Invalid input", detail, errors=errors)


_HTTP_CODES = {
    400: ("bad_request", "Bad request"),
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
    413: ("payload_too_large", "Request body too large"),
    415: ("unsupported_media_type", "Unsupported media type"),
}
# Codes rendered outside the exception tree: an unexpected failure, an HTTP error without a
# code of its own, and the 431 that api/connection.py writes before any route runs.
_OTHER_CODES = ("internal_error", "http_error", "headers_too_large")


def all_codes() -> list[str]:
    """Every `code` the server can send, for the OpenAPI enum: the exception tree's (the
    server's own classes, not the SDK's client-side subclasses) and the HTTP layer's."""
    tree = {cls.code for cls in all_error_classes() if cls.__module__ == WorkLedgerError.__module__}
    return sorted(tree | {code for code, _ in _HTTP_CODES.values()} | set(_OTHER_CODES))


def http_response(exc: StarletteHTTPException) -> JSONResponse:
    code, title = _HTTP_CODES.get(exc.status_code, ("http_error", "HTTP error"))
    if exc.status_code == 404:
        detail = "no such endpoint; /openapi.json lists every endpoint of the ledger API"
    elif exc.status_code == 405:
        detail = "this endpoint does not take that method; /openapi.json lists the methods"
    else:
        detail = str(exc.detail)
    if exc.status_code == 400:
        code, detail = "invalid_input", f"{detail}; send a JSON object"
        return problem_response(422, code, "Invalid input", detail)
    headers = dict(exc.headers) if exc.headers else None
    return problem_response(exc.status_code, code, title, detail, headers=headers)


def install(app: FastAPI) -> None:
    """One handler per kind of error: ledger errors, validation errors, HTTP errors."""

    async def on_ledger_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, WorkLedgerError)
        if exc.unit_id is not None:  # the access log names the refused unit
            request.state.unit_id = exc.unit_id
        return error_response(exc)

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return validation_response(exc)

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return http_response(exc)

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected_error", error=f"{type(exc).__name__}: {exc}")
        return problem_response(
            500,
            "internal_error",
            "Internal error",
            "the ledger failed unexpectedly and this request may not have been applied; retry "
            "it with the same Idempotency-Key, and report it if it keeps failing",
        )

    app.add_exception_handler(WorkLedgerError, on_ledger_error)
    app.add_exception_handler(Exception, on_unexpected)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)


def problem_content(description: str, **extra: Any) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        **extra,
    }


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying the same request (same Idempotency-Key).",
        "schema": {"type": "integer", "minimum": 0},
    }
}
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: problem_content("Missing, unknown or revoked token"),
    429: problem_content(
        "Too many failed authentications from this client (Retry-After)", headers=_RETRY_AFTER
    ),
}
FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: problem_content("The token's role, or the unit's holder, forbids this")
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: problem_content("Unknown unit, attempt or question")
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: problem_content(
        "A ledger invariant refused it (names `invariant`: stop, do not retry), or the first "
        "request under this Idempotency-Key still runs (`invariant` idempotency_key_in_flight, "
        "with Retry-After: retry the same request)",
        headers=_RETRY_AFTER,
    )
}
TOO_LARGE: dict[int | str, dict[str, Any]] = {413: problem_content("Request body over 1 MiB")}
INVALID: dict[int | str, dict[str, Any]] = {
    422: problem_content("Malformed input, or Idempotency-Key reused")
}
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: problem_content(
        "The database cannot be reached, or the server is at its connection cap: retry after "
        "Retry-After, on another replica if you have one",
        headers=_RETRY_AFTER,
    )
}

READ_RESPONSES: dict[int | str, dict[str, Any]] = {
    **UNAUTHORIZED,
    **FORBIDDEN,
    **NOT_FOUND,
    **INVALID,
    **UNAVAILABLE,
}
WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **READ_RESPONSES,
    **CONFLICT,
    **TOO_LARGE,
}


def document_middleware_answers(schema: dict[str, Any]) -> None:
    """What answers in front of the routes, on every operation it can reach: the body
    limit's 413 where a body is read, the failure limiter's 429 where a token is checked,
    the connection cap's 503 everywhere; and `Problem.code` as the enum of every code."""
    for operations in schema["paths"].values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "requestBody" in operation:
                responses.setdefault("413", TOO_LARGE[413])
            if "security" in operation:
                responses.setdefault("429", UNAUTHORIZED[429])
            responses["503"] = UNAVAILABLE[503]
    problem = schema["components"]["schemas"]["Problem"]
    problem["properties"]["code"]["enum"] = all_codes()
