"""Long-poll wake-ups from LISTEN/NOTIFY, one listening connection per process.

Waiting clients hold no database connection: each parks on an asyncio event that the
listener sets when PostgreSQL notifies (migration 0005). A waiter takes its event
*before* it looks at the database, so a notification that lands between the look and the
wait is never missed. Lapsed leases send no notification, so waiters also wake every
`FALLBACK_SECONDS`; so do they while the listener reconnects after losing its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import structlog

from work_ledger.db.connect import connect

CLAIMABLE = "wl_claimable"
QUESTION = "wl_question"
FALLBACK_SECONDS = 3.0
log = structlog.get_logger("work_ledger.longpoll")


class Notifier:
    def __init__(self, url: str, *, connect_fn: Callable[[str], Any] = connect) -> None:
        self._url = url
        self._connect = connect_fn
        self._claimable = asyncio.Event()
        self._questions_changed = asyncio.Event()
        self._question: dict[str, tuple[asyncio.Event, int]] = {}
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self.connected = asyncio.Event()

    # -- what waiters use ------------------------------------------------------------

    def claimable(self) -> asyncio.Event:
        """The event the next 'a unit became claimable' notification sets."""
        return self._claimable

    def questions_changed(self) -> asyncio.Event:
        """The event the next 'a question opened or closed' notification sets."""
        return self._questions_changed

    @contextlib.asynccontextmanager
    async def question(self, question_id: str) -> AsyncIterator[asyncio.Event]:
        """The event set when this question closes, shared by all its waiters."""
        event, count = self._question.get(question_id, (asyncio.Event(), 0))
        self._question[question_id] = (event, count + 1)
        try:
            yield event
        finally:
            event, count = self._question[question_id]
            if count <= 1:
                self._question.pop(question_id, None)
            else:
                self._question[question_id] = (event, count - 1)

    @staticmethod
    async def wait(event: asyncio.Event, seconds: float) -> bool:
        """Wait for `event`, at most `seconds` (and at most FALLBACK_SECONDS) seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, min(seconds, FALLBACK_SECONDS)))
        return event.is_set()

    # -- the listener ----------------------------------------------------------------

    def _on_claimable(self, *_: Any) -> None:
        event, self._claimable = self._claimable, asyncio.Event()
        event.set()

    def _on_question(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        event, self._questions_changed = self._questions_changed, asyncio.Event()
        event.set()
        status, _, question_id = payload.partition(":")
        if status != "open" and question_id in self._question:
            self._question[question_id][0].set()

    def _on_lost(self, *_: Any) -> None:
        self._lost.set()

    async def _listen_once(self) -> None:
        conn = await self._connect(self._url)
        self._conn = conn
        try:
            self._lost.clear()
            conn.add_termination_listener(self._on_lost)
            await conn.add_listener(CLAIMABLE, self._on_claimable)
            await conn.add_listener(QUESTION, self._on_question)
            self.connected.set()
            # Anything that changed while we were not listening: wake everyone once.
            self._on_claimable()
            self._on_question(None, 0, QUESTION, "reconnected:")
            await self._lost.wait()
        finally:
            self.connected.clear()
            self._conn = None
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    async def _run(self) -> None:
        backoff = 0.2
        while True:
            try:
                await self._listen_once()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: keep trying, waiters poll
                log.warning("listener_lost", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def start(self, *, within: float = 10.0) -> None:
        self._task = asyncio.create_task(self._run(), name="work-ledger-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connected.wait(), within)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
