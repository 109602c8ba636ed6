"""`AsyncWork`: a claimed unit whose lease a background task heartbeats (`AsyncClient.claim`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from work_ledger.client import _calls as calls
from work_ledger.client._work import WorkState, lease_of
from work_ledger.client.errors import Unreachable
from work_ledger.client.models import (
    Attempt,
    Claim,
    Question,
    Step,
    Unit,
    UnitDetail,
)
from work_ledger.errors import AttemptSuperseded, Unavailable, WorkLedgerError

if TYPE_CHECKING:
    from work_ledger.client.aio import AsyncClient

T = TypeVar("T")


class AsyncWork:
    """A claimed unit and its live attempt; every write is fenced by the attempt id."""

    def __init__(
        self,
        client: AsyncClient,
        claim: Claim,
        *,
        lease_seconds: int | None = None,
        heartbeat_fraction: float = 1 / 3,
        on_lost: Callable[[WorkLedgerError], None] | None = None,
    ) -> None:
        assert claim.unit is not None
        assert claim.attempt is not None
        self.client = client
        self.resumed = claim.resumed
        self.on_lost = on_lost
        self._state = WorkState(claim.unit, claim.attempt, lease_of(claim.unit, lease_seconds))
        self.interval = max(0.1, self._state.lease_seconds * heartbeat_fraction)
        self._task: asyncio.Task[None] | None = None

    @property
    def unit(self) -> Unit:
        return self._state.unit

    @property
    def attempt(self) -> Attempt:
        return self._state.attempt

    @property
    def live(self) -> bool:
        return self._state.live

    @property
    def lost(self) -> WorkLedgerError | None:
        return self._state.lost

    async def __aenter__(self) -> AsyncWork:
        self.start_heartbeat()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop_heartbeat()
        if exc is not None:
            if self._state.live and not isinstance(exc, AttemptSuperseded):
                reason = f"{type(exc).__name__}: {exc}"[:2000]
                with contextlib.suppress(WorkLedgerError):
                    await self.release(outcome="failed", reason=reason)
            return
        self._state.check()

    def start_heartbeat(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop_heartbeat(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _beat(self) -> None:
        while self._state.live:
            await asyncio.sleep(self.interval)
            if not self._state.live:
                return
            try:
                step = await self.client.heartbeat(
                    self.attempt.id, lease_seconds=self._state.lease_seconds
                )
            except (Unreachable, Unavailable):
                continue  # keep trying; if the server stays away, the lease lapses
            except WorkLedgerError as exc:
                if self._state.live:
                    self._state.lose(exc)
                    if self.on_lost is not None:
                        self.on_lost(exc)
                return
            self._state.update(step.unit, step.attempt)

    async def _fenced(self, send: Callable[[], Awaitable[T]]) -> T:
        self._state.check()
        try:
            return await send()
        except AttemptSuperseded as exc:
            self._state.lose(exc)
            raise

    def _stepped(self, step: Step) -> Step:
        self._state.update(step.unit, step.attempt)
        return step

    async def start(self) -> Step:
        ref, attempt = self.unit.id, self.attempt.id
        return self._stepped(await self._fenced(lambda: self.client.start(ref, attempt_id=attempt)))

    async def heartbeat(self) -> Step:
        lease = self._state.lease_seconds
        return self._stepped(
            await self._fenced(lambda: self.client.heartbeat(self.attempt.id, lease_seconds=lease))
        )

    async def cost(self, cost_cents: int) -> Step:
        step = await self.client.record_cost(self.attempt.id, cost_cents)
        self._state.attempt = step.attempt
        return step

    async def verify(self, evidence_url: str, *, reason: str | None = None) -> Step:
        ref, attempt = self.unit.id, self.attempt.id
        step = await self._fenced(
            lambda: self.client.verify(ref, evidence_url, attempt_id=attempt, reason=reason)
        )
        self._state.end()
        return self._stepped(step)

    async def release(self, *, outcome: str = "abandoned", reason: str | None = None) -> Step:
        ref, attempt = self.unit.id, self.attempt.id
        step = await self._fenced(
            lambda: self.client.release(ref, outcome=outcome, reason=reason, attempt_id=attempt)
        )
        self._state.end()
        return self._stepped(step)

    async def dispose(
        self, disposition: str, *, evidence_url: str | None = None, reason: str | None = None
    ) -> Unit:
        ref, attempt = self.unit.id, self.attempt.id
        unit = await self._fenced(
            lambda: self.client.dispose(
                ref, disposition, evidence_url=evidence_url, reason=reason, attempt_id=attempt
            )
        )
        self._state.end()
        self._state.unit = unit
        return unit

    async def block(self, question: str, *, assignee_group_slug: str | None = None) -> Question:
        ref, attempt = self.unit.id, self.attempt.id
        asked = await self._fenced(
            lambda: self.client.block(
                ref, question, assignee_group_slug=assignee_group_slug, attempt_id=attempt
            )
        )
        self._state.unit = asked.unit
        return asked.question

    async def wait_for_answer(
        self,
        question_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline over several long-polls)
    ) -> Question:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = calls.MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            wait = int(max(0, min(calls.MAX_WAIT_SECONDS, left)))
            question = await self.client.get_question(question_id, wait_seconds=wait)
            if question.status != "open" or wait == 0:
                break
        if question.status != "open":
            await self.refresh()
        return question

    async def ask(
        self,
        question: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline over several long-polls)
    ) -> Question:
        return await self.wait_for_answer((await self.block(question)).id, timeout=timeout)

    async def refresh(self) -> UnitDetail:
        detail = await self.client.get_unit(self.unit.id)
        self._state.unit = detail.unit
        return detail
