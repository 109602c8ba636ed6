"""`Work`: a claimed unit whose lease a background thread heartbeats (see `Client.claim`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from work_ledger.client._work import WorkBase, deadline_of, next_wait
from work_ledger.client.errors import Unreachable
from work_ledger.client.models import Claim, Question, Step, Unit, UnitDetail
from work_ledger.errors import AttemptSuperseded, Unavailable, WorkLedgerError

if TYPE_CHECKING:
    from work_ledger.client.sync import Client

T = TypeVar("T")


class Work(WorkBase):
    """A claimed unit and its live attempt; every write is fenced by the attempt id."""

    def __init__(
        self,
        client: Client,
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Work:
        self.start_heartbeat()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_heartbeat()
        if exc is not None:
            if (reason := self._release_reason(exc)) is not None:
                # The original exception matters more; if the release fails the lease lapses.
                with contextlib.suppress(WorkLedgerError):
                    self.release(outcome="failed", reason=reason)
            return
        self._state.check()

    def start_heartbeat(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._beat, name=f"wl-heartbeat-{self.unit.external_ref}", daemon=True
            )
            self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.timeout + 5)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._state.live:
                return
            try:
                step = self.client.heartbeat(
                    self.attempt.id, lease_seconds=self._state.lease_seconds
                )
            except (Unreachable, Unavailable):
                continue  # keep trying; if the server stays away, the lease lapses
            except WorkLedgerError as exc:
                self._beat_failed(exc)
                return
            self._stepped(step)

    # -- the unit's writes, fenced by the attempt ----------------------------------------

    def _fenced(self, send: Callable[[], T]) -> T:
        self._state.check()
        try:
            return send()
        except AttemptSuperseded as exc:
            self._state.lose(exc)
            self._stop.set()
            raise

    def start(self) -> Step:
        """claimed → in_progress."""
        ref, attempt = self.unit.id, self.attempt.id
        return self._stepped(self._fenced(lambda: self.client.start(ref, attempt_id=attempt)))

    def heartbeat(self) -> Step:
        lease = self._state.lease_seconds
        return self._stepped(
            self._fenced(lambda: self.client.heartbeat(self.attempt.id, lease_seconds=lease))
        )

    def cost(self, cost_cents: int) -> Step:
        """Add spent cents to this attempt; recorded even after the attempt ended."""
        step = self.client.record_cost(self.attempt.id, cost_cents)
        self._took_attempt(step.attempt)
        return step

    def verify(self, evidence_url: str, *, reason: str | None = None) -> Step:
        """in_progress → verified with a link to the evidence; the attempt ends verified."""
        ref, attempt = self.unit.id, self.attempt.id
        return self._ended(
            self._fenced(
                lambda: self.client.verify(ref, evidence_url, attempt_id=attempt, reason=reason)
            )
        )

    def release(self, *, outcome: str = "abandoned", reason: str | None = None) -> Step:
        """Give the unit back (ready); the attempt ends `abandoned` or `failed`."""
        ref, attempt = self.unit.id, self.attempt.id
        return self._ended(
            self._fenced(
                lambda: self.client.release(ref, outcome=outcome, reason=reason, attempt_id=attempt)
            )
        )

    def dispose(
        self, disposition: str, *, evidence_url: str | None = None, reason: str | None = None
    ) -> Unit:
        """Close the unit: MIGRATED once verified; DROPPED/DEAD in progress; DEFERRED blocked."""
        ref, attempt = self.unit.id, self.attempt.id
        unit = self._fenced(
            lambda: self.client.dispose(
                ref, disposition, evidence_url=evidence_url, reason=reason, attempt_id=attempt
            )
        )
        self._state.end()
        self._took_unit(unit)
        return unit

    def block(self, question: str, *, assignee_group_slug: str | None = None) -> Question:
        """in_progress → blocked with a question; the lease pauses until it is answered."""
        ref, attempt = self.unit.id, self.attempt.id
        asked = self._fenced(
            lambda: self.client.block(
                ref, question, assignee_group_slug=assignee_group_slug, attempt_id=attempt
            )
        )
        self._took_unit(asked.unit)
        return asked.question

    def wait_for_answer(self, question_id: str, *, timeout: float | None = None) -> Question:
        """Long-poll until the question is answered or cancelled (or `timeout` passes)."""
        deadline = deadline_of(timeout)
        while True:
            wait = next_wait(deadline)
            question = self.client.get_question(question_id, wait_seconds=wait)
            if question.status != "open" or wait == 0:
                break
        if question.status != "open":
            self.refresh()
        return question

    def ask(self, question: str, *, timeout: float | None = None) -> Question:
        """Block with a question and wait for its answer (`.answer`), or the timeout."""
        return self.wait_for_answer(self.block(question).id, timeout=timeout)

    def refresh(self) -> UnitDetail:
        detail = self.client.get_unit(self.unit.id)
        self._took_unit(detail.unit)
        return detail
