"""Liveness and readiness (no token needed)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from work_ledger.api import problems
from work_ledger.api.schemas import Health
from work_ledger.errors import Unavailable

router = APIRouter(tags=["health"])
READY_TIMEOUT_SECONDS = 2.0


@router.get("/healthz")
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@router.get("/readyz", responses=problems.UNAVAILABLE)
async def readyz(request: Request) -> Health:
    """The database answers `SELECT 1` within two seconds; 503 otherwise."""
    pool = request.app.state.ledger.store.pool
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS):
            async with pool.acquire() as conn:
                await conn.fetchval("SELECT 1")
    except (TimeoutError, OSError, Exception) as exc:
        raise Unavailable(
            f"the ledger database did not answer SELECT 1 within {READY_TIMEOUT_SECONDS:g}s "
            f"({type(exc).__name__}); route traffic elsewhere and retry shortly"
        ) from exc
    return Health(status="ok")
