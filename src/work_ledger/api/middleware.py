"""The edge of every request: the 1 MiB body limit and one JSON access log line.

Pure ASGI (no BaseHTTPMiddleware). The body is not read here: a declared Content-Length
over the limit is answered 413 problem+json at once, and a body streamed past it raises
PayloadTooLarge from `receive`, so the route reads it only after authenticating the
caller. The access line names the principal, method, path, status, unit and duration.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from work_ledger.api.problems import problem_response
from work_ledger.errors import PayloadTooLarge

MAX_BODY_BYTES = 1 << 20
access_log = structlog.get_logger("work_ledger.access")


def configure_logging(level: int = logging.INFO) -> None:
    """JSON lines on stdout, one per request (and per notable event)."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )


_TOO_LARGE = (
    "the request body is over {limit} bytes; send at most 1000 units per batch and "
    "evidence as links, never payloads"
)


def too_large(limit: int) -> Any:
    """The 413 problem for a body over `limit` bytes."""
    return problem_response(
        413, "payload_too_large", "Request body too large", _TOO_LARGE.format(limit=limit)
    )


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if declared_length(scope) > self.max_body:
                await too_large(self.max_body)(scope, receive, send_logged)
                return
            await self.app(scope, limited(receive, self.max_body), send_logged)
        finally:
            log_request(scope, status, started)


def log_request(scope: Scope, status: int, started: float) -> None:
    """The request's access line (`started` from `time.perf_counter()`)."""
    state = scope.get("state") or {}
    access_log.info(
        "request",
        principal=state.get("principal"),
        method=scope["method"],
        path=scope["path"],
        status=status,
        unit_id=state.get("unit_id"),
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
    )


def declared_length(scope: Scope) -> int:
    """The request's Content-Length (0 when absent or not a number)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def limited(receive: Receive, limit: int) -> Receive:
    """`receive`, refusing a body that streams past `limit` bytes."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise PayloadTooLarge(_TOO_LARGE.format(limit=limit))
        return message

    return counted
