"""The edge of every request: the 1 MiB body limit and one JSON access log line.

Pure ASGI (no BaseHTTPMiddleware): a body is read once, counted, and handed on; one over
the limit is answered 413 problem+json before any handler runs. The access line names
the principal, method, path, status, unit and duration.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from work_ledger.api.problems import problem_response

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


def _too_large(limit: int) -> Any:
    return problem_response(
        413,
        "payload_too_large",
        "Request body too large",
        f"the request body is over {limit} bytes; send at most 1000 units per batch and "
        "evidence as links, never payloads",
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
            body = await self._read_body(scope, receive)
            if body is None:
                await _too_large(self.max_body)(scope, receive, send_logged)
                return
            await self.app(scope, _replay(body, receive), send_logged)
        finally:
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

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when it is over the limit."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    if int(value) > self.max_body:
                        return None
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
