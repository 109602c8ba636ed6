"""`AsyncWork`: a claimed unit whose lease a background task heartbeats (`AsyncClient.claim`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from work_ledger.client._work import WorkBase, deadline_of, next_wait
from work_ledger.client.errors import Unreachable
from work_ledger.client.models import Claim, Question, Step, Unit, UnitDetail
from work_ledger.errors import AttemptSuperseded, Unavailable, WorkLedgerError

if TYPE_CHECKING:
    from work_ledger.client.aio import AsyncClient

T = TypeVar("T")


class AsyncWork(WorkBase):
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
        super().__init__(
            claim, lease_seconds=lease_seconds, heartbeat_fraction=heartbeat_fraction,
            on_lost=on_lost,
        )  # fmt: skip
        self.client = client
        self._task: asyncio.Task[None] | None = None

    @property
    def live(self) -> bool:
        return self._state.live

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
            if (reason := self._release_reason(exc)) is not None:
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
                self._beat_failed(exc)
                return
            self._stepped(step)

    async def _fenced(self, send: Callable[[], Awaitable[T]]) -> T:
        self._state.check()
        try:
            return await send()
        except AttemptSuperseded as exc:
            self._state.lose(exc)
            raise

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
        self._took_attempt(step.attempt)
        return step

    async def verify(self, evidence_url: str, *, reason: str | None = None) -> Step:
        ref, attempt = self.unit.id, self.attempt.id
        return self._ended(
            await self._fenced(
                lambda: self.client.verify(ref, evidence_url, attempt_id=attempt, reason=reason)
            )
        )

    async def release(self, *, outcome: str = "abandoned", reason: str | None = None) -> Step:
        ref, attempt = self.unit.id, self.attempt.id
        return self._ended(
            await self._fenced(
                lambda: self.client.release(ref, outcome=outcome, reason=reason, attempt_id=attempt)
            )
        )

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
        self._took_unit(unit)
        return unit

    async def block(self, question: str, *, assignee_group_slug: str | None = None) -> Question:
        ref, attempt = self.unit.id, self.attempt.id
        asked = await self._fenced(
            lambda: self.client.block(
                ref, question, assignee_group_slug=assignee_group_slug, attempt_id=attempt
            )
        )
        self._took_unit(asked.unit)
        return asked.question

    async def wait_for_answer(
        self,
        question_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline over several long-polls)
    ) -> Question:
        deadline = deadline_of(timeout)
        while True:
            wait = next_wait(deadline)
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
        self._took_unit(detail.unit)
        return detail
