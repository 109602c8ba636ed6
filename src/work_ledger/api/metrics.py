"""GET /metrics: Prometheus text exposition (no token, like /healthz).

`install(app)` adds the timing middleware and this route; the gauges are read from the
views at scrape time, at most once per `CACHE_SECONDS`, so no API request ever waits on
them.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from work_ledger.metrics import LedgerMetrics, MetricsMiddleware

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def metrics(request: Request) -> Response:
    """Queue depth, stalls, claims and reclaims (from the views), refusals by invariant
    and request latency by route, in the Prometheus text format."""
    ledger_metrics: LedgerMetrics = request.app.state.metrics
    await ledger_metrics.refresh(request.app.state.read_pool)
    return Response(ledger_metrics.render(), media_type=CONTENT_TYPE_LATEST)


def install(app: FastAPI) -> LedgerMetrics:
    """Time every request of `app` and serve GET /metrics."""
    ledger_metrics = LedgerMetrics()
    app.state.metrics = ledger_metrics
    app.add_middleware(MetricsMiddleware, metrics=ledger_metrics)
    app.include_router(router)
    return ledger_metrics
