"""The edge of every request: the 1 MiB body limit and one JSON access log line.

Pure ASGI (no BaseHTTPMiddleware). The body is not read here: a declared Content-Length
over the limit is answered 413 problem+json at once, and a body streamed past it raises
PayloadTooLarge from `receive`, so the route reads it only after authenticating the
caller. The access line names the principal, method, path, status, unit and duration.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from typing import Any, TextIO

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from work_ledger.api.problems import problem_response
from work_ledger.errors import PayloadTooLarge

MAX_BODY_BYTES = 1 << 20
access_log = structlog.get_logger("work_ledger.access")


def configure_logging(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """JSON lines on `stream` (stdout), one per request (and per notable event)."""
    global _preformatted
    processors: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.JSONRenderer(),
    ]
    factory = structlog.PrintLoggerFactory(stream or sys.stdout)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    _preformatted = _Preformatted(processors, factory, stream or sys.stdout)
    if level > logging.INFO:
        _preformatted = None


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
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    principal, unit_id = state.get("principal"), state.get("unit_id")
    if _preformatted is not None and _preformatted.in_force():
        _preformatted.write(principal, scope["method"], scope["path"], status, unit_id, duration_ms)
        return
    access_log.info(
        "request",
        principal=principal,
        method=scope["method"],
        path=scope["path"],
        status=status,
        unit_id=unit_id,
        duration_ms=duration_ms,
    )


class _Preformatted:
    """The access line as `configure_logging`'s structlog chain renders it (same keys in the
    same order, the same JSON), written by one f-string: structlog's processor chain and
    JSON renderer cost about three times as much per request (bench/RESULTS.md). In force
    only while that configuration is (a test capturing logs reconfigures structlog)."""

    def __init__(self, processors: list[Any], factory: Any, stream: TextIO) -> None:
        # A copy: capturing logs refills the configured list in place.
        self.chain, self.factory, self.stream = tuple(processors), factory, stream
        self._second = -1
        self._stamp = ""

    def in_force(self) -> bool:
        config = structlog.get_config()
        return (
            config["logger_factory"] is self.factory and tuple(config["processors"]) == self.chain
        )

    def write(
        self,
        principal: str | None,
        method: str,
        path: str,
        status: int,
        unit_id: str | None,
        duration_ms: float,
    ) -> None:
        self.stream.write(
            f'{{"principal": {_json(principal)}, "method": {_json(method)}, '
            f'"path": {_json(path)}, "status": {status}, "unit_id": {_json(unit_id)}, '
            f'"duration_ms": {duration_ms!r}, "event": "request", "level": "info", '
            f'"timestamp": "{self._timestamp()}"}}\n'
        )
        self.stream.flush()

    def _timestamp(self) -> str:
        """Now in ISO 8601, UTC, to the microsecond; the date part made once a second."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._stamp}.{int((now - second) * 1_000_000):06d}Z"


_json = json.JSONEncoder().encode
_preformatted: _Preformatted | None = None


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
