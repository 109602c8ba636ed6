"""GET /metrics: Prometheus text exposition; no token unless WL_METRICS_TOKEN is set.

Anyone who can reach the port reads domain names and counts by default (as a Prometheus
scraper expects); with `WL_METRICS_TOKEN=1` the route takes a token of any role (a
`reader` token is the least), sent by the scraper as a bearer token.

`install(app)` adds the timing middleware and this route; the gauges are read from the
views at scrape time, at most once per `CACHE_SECONDS`, so no API request ever waits on
them.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from work_ledger.api import problems
from work_ledger.api.auth import ANY_ROLE, require
from work_ledger.api.collectors import LedgerMetrics, MetricsMiddleware


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
