"""GET /metrics: Prometheus text exposition; no token unless WL_METRICS_TOKEN is set.

Anyone who can reach the port reads domain names and counts by default (as a Prometheus
scraper expects); with `WL_METRICS_TOKEN=1` the route takes a token of any role (a
`reader` token is the least), sent by the scraper as a bearer token.

`install(app)` adds the timing middleware (`MetricsMiddleware`, here) and this route; the
families and the gauges they read from the views, at scrape time and at most once per
`CACHE_SECONDS` so that no API request ever waits on them, are api/collectors.py's.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from work_ledger.api import problems
from work_ledger.api.auth import ANY_ROLE, require
from work_ledger.api.collectors import LedgerMetrics

MAX_PROBLEM_BYTES = 64 * 1024
UNMATCHED = "unmatched"


async def metrics(request: Request) -> Response:
    """Queue depth, stalls, claims and reclaims (from the views), refusals by invariant
    and request latency by route, in the Prometheus text format."""
    ledger_metrics: LedgerMetrics = request.app.state.metrics
    await ledger_metrics.refresh(request.app.state.read_pool)
    return Response(ledger_metrics.render(), media_type=CONTENT_TYPE_LATEST)


def install(app: FastAPI, *, token: bool = False) -> LedgerMetrics:
    """Time every request of `app` and serve GET /metrics (with a token if `token`)."""
    ledger_metrics = LedgerMetrics()
    app.state.metrics = ledger_metrics
    app.add_middleware(MetricsMiddleware, metrics=ledger_metrics)
    router = APIRouter(tags=["health"])
    router.add_api_route(
        "/metrics",
        metrics,
        methods=["GET"],
        operation_id="metrics",
        response_class=Response,
        dependencies=[Depends(require(*ANY_ROLE))] if token else [],
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"},
            **(problems.UNAUTHORIZED if token else {}),
        },
    )
    app.include_router(router)
    return ledger_metrics


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class MetricsMiddleware:
    """Times every request by its route template, and counts problems and claim answers.

    Pure ASGI. Only problem+json bodies are read (small); every other body passes through
    untouched. A claim's result is what its route left in the request's state
    (`claim_result`, api/request_state.py). An error that escapes the app unanswered is
    counted as the 500 internal_error problem that Starlette's error middleware, outside
    this one, answers it with."""

    def __init__(self, app: ASGIApp, metrics: LedgerMetrics) -> None:
        self.app = app
        self.metrics = metrics
        # Each labelled latency series, looked up once: `labels()` validates and locks.
        self._series: dict[tuple[str, str, int], Any] = {}

    def _observe(self, method: str, route: str, status: int, seconds: float) -> None:
        series = self._series.get((method, route, status))
        if series is None:
            series = self.metrics.request_duration.labels(method, route, str(status))
            self._series[(method, route, status)] = series
        series.observe(seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        answered = False
        problem: bytearray | None = None  # the body of a problem+json answer

        async def send_watched(message: Message) -> None:
            nonlocal status, answered, problem
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
                if _is_problem(message.get("headers", ())):
                    problem = bytearray()
            elif message["type"] == "http.response.body" and problem is not None:
                if len(problem) < MAX_PROBLEM_BYTES:
                    problem.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    self.metrics.observe_problem(bytes(problem))
            await send(message)

        try:
            await self.app(scope, receive, send_watched)
        except Exception:
            if not answered:
                self.metrics.refusals.labels("internal_error", "none").inc()
            raise
        finally:
            self._observe(scope["method"], _route(scope), status, time.perf_counter() - started)
        result = (scope.get("state") or {}).get("claim_result")
        if result is not None:
            self.metrics.observe_claim(result)


def _is_problem(headers: Any) -> bool:
    content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    return bool(content_type.startswith(b"application/problem+json"))
