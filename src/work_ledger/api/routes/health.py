"""Liveness and readiness (no token needed)."""

from __future__ import annotations

import asyncio

from asyncpg import Pool
from fastapi import APIRouter, Request

from work_ledger.api import problems
from work_ledger.api.answers import Health
from work_ledger.errors import Unavailable

router = APIRouter(tags=["health"])
READY_TIMEOUT_SECONDS = 2.0


@router.get("/healthz", operation_id="healthz")
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


async def _select_one(pool: Pool) -> None:
    async with pool.acquire() as conn:
        await conn.fetchval("SELECT 1")


def _forget(task: asyncio.Task[None]) -> None:
    """Retrieve a probe's late outcome, so that nothing logs it as unhandled."""
    if not task.cancelled():
        task.exception()


@router.get("/readyz", responses=problems.UNAVAILABLE, operation_id="readyz")
async def readyz(request: Request) -> Health:
    """The database answers `SELECT 1` within two seconds; 503 otherwise.

    The probe runs as its own task and is abandoned at the deadline rather than awaited:
    on a hung server even a cancelled query's cleanup hangs, and /readyz must not."""
    probe = asyncio.create_task(_select_one(request.app.state.ledger.store.pool))
    done, _ = await asyncio.wait({probe}, timeout=READY_TIMEOUT_SECONDS)
    if probe in done and probe.exception() is None:
        return Health(status="ok")
    why = "no answer" if probe not in done else type(probe.exception()).__name__
    if probe not in done:
        probe.cancel()
        probe.add_done_callback(_forget)
    raise Unavailable(
        f"the ledger database did not answer SELECT 1 within {READY_TIMEOUT_SECONDS:g}s "
        f"({why}); route traffic elsewhere and retry shortly"
    )
