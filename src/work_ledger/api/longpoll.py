"""Long-poll wake-ups from LISTEN/NOTIFY, one listening connection per process.

Waiting clients hold no database connection: each parks on an asyncio event that the
listener sets when PostgreSQL notifies (migration 0005). A waiter takes its event
*before* it looks at the database, so a notification that lands between the look and the
wait is never missed.

Claim waiters queue in arrival order, one queue per domain asked for (and one for any
domain). A notification names the unit's domain and wakes at most `CLAIM_WAKE_BATCH`
waiters of that domain's queue and of the any-domain queue, not all: a thousand idle
agents must not send a thousand claims for one new unit.
A woken waiter that claims passes the turn to the next one (more units may be ready);
one that leaves without claiming hands its turn on. Lapsed leases send no notification,
so once every `FALLBACK_SECONDS` the first waiter looks anyway; question waiters simply
wake that often. Every waiter wakes while the listener reconnects.

On shutdown (SIGTERM) `drain` wakes every waiter for good: each looks once more and
answers what it has (a claim `unit: null`), so a stopping replica holds no long-poll
open for its whole `wait_seconds`, and the agent asks again at another replica.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import structlog

from work_ledger.db.connect import connect

CLAIMABLE = "wl_claimable"
QUESTION = "wl_question"
FALLBACK_SECONDS = 3.0
CLAIM_WAKE_BATCH = 8


class ClaimQueue:
    """Claim waiters in arrival order; a wake-up goes to the first ones still waiting."""

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def enter(self) -> asyncio.Future[None]:
        """Join the queue; the future resolves when it is this waiter's turn to look."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        return turn

    def leave(self, turn: asyncio.Future[None], *, claimed: bool, looking_again: bool) -> None:
        """Leave the queue after a look. A claim passes a turn on (more units may be
        claimable); a turn given but not used for another look is handed on."""
        with contextlib.suppress(ValueError):
            self._waiting.remove(turn)
        woken = turn.done() and not turn.cancelled()
        if claimed or (woken and not looking_again):
            self.wake(1)
        if not turn.done():
            turn.cancel()

    def wake(self, count: int) -> None:
        while count > 0 and self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                count -= 1


log = structlog.get_logger("work_ledger.longpoll")


class Notifier:
    def __init__(self, url: str, *, connect_fn: Callable[[str], Any] = connect) -> None:
        self._url = url
        self._connect = connect_fn
        self._claims: dict[str | None, ClaimQueue] = {}
        self._questions_changed = asyncio.Event()
        self._question: dict[str, tuple[asyncio.Event, int]] = {}
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._fallback: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self.connected = asyncio.Event()
        self.draining = False

    def drain(self) -> None:
        """Shutdown began: wake every waiter now, and let none wait again."""
        self.draining = True
        for queue in self._claims.values():
            queue.wake(len(queue))
        self._questions_changed.set()
        for event, _ in self._question.values():
            event.set()

    # -- what waiters use ------------------------------------------------------------

    def claims(self, domain: str | None) -> ClaimQueue:
        """The queue of claim waiters for `domain` (None: any domain)."""
        return self._claims.setdefault(domain, ClaimQueue())

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

    def _on_claimable(self, _conn: Any, _pid: int, _channel: str, domain: str) -> None:
        # '*': a fleet-wide control opened (0022), which may free units of any domain.
        keys = list(self._claims) if domain == "*" else [domain, None]
        for key in keys:
            if key in self._claims:
                self._claims[key].wake(CLAIM_WAKE_BATCH)

    async def _look_for_lapsed_leases(self) -> None:
        while True:
            await asyncio.sleep(FALLBACK_SECONDS)
            for queue in self._claims.values():
                queue.wake(1)

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
            for queue in self._claims.values():
                queue.wake(len(queue))
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
        self._fallback = asyncio.create_task(
            self._look_for_lapsed_leases(), name="work-ledger-lapsed-leases"
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connected.wait(), within)

    async def stop(self) -> None:
        for task in (self._task, self._fallback):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._fallback = None
