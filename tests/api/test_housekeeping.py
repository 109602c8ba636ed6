"""serve's housekeeping loops: a failing round is logged, and the loop goes on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from structlog.testing import capture_logs

from work_ledger.api import app
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def _until(check: Callable[[], Awaitable[bool]], seconds: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "the loop never got there"
        await asyncio.sleep(0.02)


async def test_a_failing_fold_is_logged_and_the_next_round_folds(
    ledger: Ledger, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the fold's function gone, each round logs `read_summary_fold_failed` with the
    database's error; once it is back, the same loop folds the waiting change rows."""
    monkeypatch.setattr(app, "FOLD_EVERY_SECONDS", 0.01)
    monkeypatch.setattr(app, "FOLD_MIN_ROWS", 0)
    await ledger.register([NewUnit(f"u{i}", "f", "d") for i in range(3)], OPERATOR)
    await raw.execute("ALTER FUNCTION wl_fold_read_summaries(integer) RENAME TO wl_fold_gone")
    with capture_logs() as logs:
        folding = asyncio.create_task(app._fold_read_summaries(ledger))
        try:

            async def failed() -> bool:
                return any(e["event"] == "read_summary_fold_failed" for e in logs)

            await _until(failed)
            await raw.execute(
                "ALTER FUNCTION wl_fold_gone(integer) RENAME TO wl_fold_read_summaries"
            )

            async def folded() -> bool:
                return await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 0

            await _until(folded)
        finally:
            folding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await folding
    failure = next(e for e in logs if e["event"] == "read_summary_fold_failed")
    assert "wl_fold_read_summaries" in failure["error"]
    assert failure["log_level"] == "warning"
