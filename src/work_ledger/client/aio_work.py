"""`AsyncWork`: a claimed unit whose lease is heartbeaten in the background (`AsyncClient.claim`).

An exception raised inside `async with` releases the unit (attempt outcome `failed`), unless
the claim was lost; a lost claim (`AttemptSuperseded`) stops the heartbeats and is raised by
the next call on the work, and at the end of the block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

from work_ledger.client import _calls as calls
from work_ledger.client._aio_heartbeat import AsyncHeartbeat
from work_ledger.client._sending import Call
from work_ledger.client._work import WorkBase, deadline_of, next_wait
from work_ledger.client.errors import Unreachable
from work_ledger.client.models import Claim, NewChild, Question, Split, Step, Unit, UnitDetail
from work_ledger.client.money import CostRecord
from work_ledger.errors import AttemptSuperseded, Unavailable, WorkLedgerError

T = TypeVar("T")


class AsyncSender(Protocol):
    """What a unit's work needs of its client, `AsyncClient`: to send one call."""

    timeout: float

    async def send(self, call: Call[T]) -> T: ...


class AsyncWork(WorkBase):
    """A claimed unit and its live attempt; every write is fenced by the attempt id."""

    def __init__(
        self,
        client: AsyncSender,
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
        self._heartbeat = AsyncHeartbeat(
            self._beat,
            self.interval,
            name=f"wl-heartbeat-{self.unit.external_ref}",
            patience=client.timeout + 5,
        )

    @property
    def live(self) -> bool:
        """Whether the attempt is still held (not ended, not lost)."""
        return self._state.live

    # -- lifecycle -----------------------------------------------------------------------

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
                # The original exception matters more; if the release fails the lease lapses.
                with contextlib.suppress(WorkLedgerError):
                    await self.release(outcome="failed", reason=reason)
            return
        self._state.check()

    def start_heartbeat(self) -> None:
        self._heartbeat.start()

    async def stop_heartbeat(self) -> None:
        await self._heartbeat.stop()

    async def _beat(self) -> bool:
        """One heartbeat; False once the claim is over (ended, or lost: told to `on_lost`)."""
        if not self._state.live:
            return False
        try:
            step = await self.client.send(
                calls.heartbeat(self.attempt.id, self._state.lease_seconds, None)
            )
        except (Unreachable, Unavailable):
            return True  # keep trying; if the server stays away, the lease lapses
        except WorkLedgerError as exc:
            self._beat_failed(exc)
            return False
        self._stepped(step)
        return self._state.live

    # -- the unit's writes, fenced by the attempt ----------------------------------------

    async def _fenced(self, call: Call[T]) -> T:
        self._state.check()
        try:
            return await self.client.send(call)
        except AttemptSuperseded as exc:
            self._state.lose(exc)
            raise

    async def start(self) -> Step:
        """claimed → in_progress."""
        return self._stepped(await self._fenced(calls.start(self.unit.id, self.attempt.id, None)))

    async def heartbeat(self) -> Step:
        """Renew the lease now (the background heartbeat does it by itself)."""
        call = calls.heartbeat(self.attempt.id, self._state.lease_seconds, None)
        return self._stepped(await self._fenced(call))

    async def cost(
        self,
        cost_cents: int,
        *,
        model: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        estimated: bool = False,
    ) -> Step:
        """Record spent money on this attempt (optionally by model and tokens); recorded
        even after the attempt ended, and past a budget's cap."""
        record = CostRecord(
            cost_cents,
            model,
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            estimated,
        )
        return await self.record(record)

    async def record(self, record: CostRecord) -> Step:
        """Record one `CostRecord` on this attempt (as `cost`)."""
        step = await self.client.send(calls.record_cost(self.attempt.id, record, None))
        self._took_attempt(step.attempt)
        return step

    async def verify(self, evidence_url: str, *, reason: str | None = None) -> Step:
        """in_progress → verified with a link to the evidence; the attempt ends verified."""
        call = calls.verify(self.unit.id, evidence_url, self.attempt.id, reason, None)
        return self._ended(await self._fenced(call))

    async def release(self, *, outcome: str = "abandoned", reason: str | None = None) -> Step:
        """Give the unit back (ready); the attempt ends `abandoned` or `failed`."""
        call = calls.release(self.unit.id, outcome, reason, self.attempt.id, None)
        return self._ended(await self._fenced(call))

    async def dispose(
        self, disposition: str, *, evidence_url: str | None = None, reason: str | None = None
    ) -> Unit:
        """Close the unit: MIGRATED once verified; DROPPED/DEAD in progress; DEFERRED blocked."""
        call = calls.dispose(self.unit.id, disposition, evidence_url, reason, self.attempt.id, None)
        unit = await self._fenced(call)
        self._state.end()
        self._took_unit(unit)
        return unit

    async def split(
        self, children: Iterable[NewChild | Mapping[str, Any] | str], *, reason: str | None = None
    ) -> Split:
        """Hand the unit back as children (see `AsyncClient.split`); the attempt ends `split`."""
        call = calls.split(self.unit.id, children, reason, self.attempt.id, None)
        done = await self._fenced(call)
        self._state.end()
        self._took_unit(done.unit)
        return done

    async def block(self, question: str, *, assignee_group_slug: str | None = None) -> Question:
        """in_progress → blocked with a question; the lease pauses until it is answered."""
        call = calls.block(self.unit.id, question, assignee_group_slug, self.attempt.id, None)
        asked = await self._fenced(call)
        self._took_unit(asked.unit)
        return asked.question

    async def wait_for_answer(
        self,
        question_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline over several long-polls)
    ) -> Question:
        """Long-poll until the question is answered or cancelled (or `timeout` passes)."""
        deadline = deadline_of(timeout)
        while True:
            wait = next_wait(deadline)
            question = await self.client.send(calls.get_question(question_id, wait))
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
        """Block with a question and wait for its answer (`.answer`), or the timeout."""
        return await self.wait_for_answer((await self.block(question)).id, timeout=timeout)

    async def refresh(self) -> UnitDetail:
        """Read the unit again (its state, lease and cost)."""
        detail = await self.client.send(calls.get_unit(self.unit.id))
        self._took_unit(detail.unit)
        return detail


class AsyncClaiming:
    """`async with client.claim(...) as work:` claims on entry, heartbeats, settles on exit."""

    def __init__(self, claim: Callable[[], Awaitable[AsyncWork]]) -> None:
        self._claim = claim
        self._work: AsyncWork | None = None

    async def __aenter__(self) -> AsyncWork:
        self._work = await self._claim()
        return await self._work.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._work is not None, "__aexit__ without __aenter__"
        await self._work.__aexit__(exc_type, exc, tb)
