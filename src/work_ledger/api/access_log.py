"""Logging: JSON lines on stdout through structlog, and one access line per request.

The configuration is structlog's documented fast one: a filtering bound logger, cached
on first use, rendering with orjson straight to bytes (`BytesLoggerFactory`). The access
line names the principal, method, path, status, unit and duration; the route leaves the
principal and unit in the request's state (`api/request_state.py`).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import BinaryIO

import orjson
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_log = structlog.get_logger("work_ledger.access")


def configure_logging(level: int = logging.INFO, stream: BinaryIO | None = None) -> None:
    """JSON lines on `stream` (stdout), one per request (and per notable event)."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.BytesLoggerFactory(stream or sys.stdout.buffer),
        cache_logger_on_first_use=True,
    )


class AccessLogMiddleware:
    """Pure ASGI: one access line per HTTP request, after its answer (status 500 if the
    app raised before answering)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
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
