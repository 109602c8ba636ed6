"""`Work`: a claimed unit whose lease a background thread heartbeats (see `Client.claim`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
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
    from work_ledger.client.sync import Client

T = TypeVar("T")


class Work:
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
        assert claim.unit is not None
        assert claim.attempt is not None
        self.client = client
        self.resumed = claim.resumed
        self.on_lost = on_lost
        self._state = WorkState(claim.unit, claim.attempt, lease_of(claim.unit, lease_seconds))
        self.interval = max(0.1, self._state.lease_seconds * heartbeat_fraction)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def unit(self) -> Unit:
        return self._state.unit

    @property
    def attempt(self) -> Attempt:
        return self._state.attempt

    @property
    def lost(self) -> WorkLedgerError | None:
        """Why the claim was lost (set by the heartbeat), or None while it is held."""
        return self._state.lost

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
            if self._state.live and not isinstance(exc, AttemptSuperseded):
                reason = f"{type(exc).__name__}: {exc}"[:2000]
                # The original exception matters more; if the release fails the lease lapses.
                with contextlib.suppress(WorkLedgerError):
                    self.release(outcome="failed", reason=reason)
            return
        if self._state.lost is not None:
            raise self._state.lost

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
                if self._state.live:
                    self._state.lose(exc)
                    if self.on_lost is not None:
                        self.on_lost(exc)
                return
            with self._lock:
                self._state.update(step.unit, step.attempt)

    # -- the unit's writes, fenced by the attempt ----------------------------------------

    def _fenced(self, send: Callable[[], T]) -> T:
        self._state.check()
        try:
            return send()
        except AttemptSuperseded as exc:
            self._state.lose(exc)
            self._stop.set()
            raise

    def _stepped(self, step: Step) -> Step:
        with self._lock:
            self._state.update(step.unit, step.attempt)
        return step

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
        with self._lock:
            self._state.attempt = step.attempt
        return step

    def verify(self, evidence_url: str, *, reason: str | None = None) -> Step:
        """in_progress → verified with a link to the evidence; the attempt ends verified."""
        ref, attempt = self.unit.id, self.attempt.id
        step = self._fenced(
            lambda: self.client.verify(ref, evidence_url, attempt_id=attempt, reason=reason)
        )
        self._state.end()
        return self._stepped(step)

    def release(self, *, outcome: str = "abandoned", reason: str | None = None) -> Step:
        """Give the unit back (ready); the attempt ends `abandoned` or `failed`."""
        ref, attempt = self.unit.id, self.attempt.id
        step = self._fenced(
            lambda: self.client.release(ref, outcome=outcome, reason=reason, attempt_id=attempt)
        )
        self._state.end()
        return self._stepped(step)

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
        with self._lock:
            self._state.unit = unit
        return unit

    def block(self, question: str, *, assignee_group_slug: str | None = None) -> Question:
        """in_progress → blocked with a question; the lease pauses until it is answered."""
        ref, attempt = self.unit.id, self.attempt.id
        asked = self._fenced(
            lambda: self.client.block(
                ref, question, assignee_group_slug=assignee_group_slug, attempt_id=attempt
            )
        )
        with self._lock:
            self._state.unit = asked.unit
        return asked.question

    def wait_for_answer(self, question_id: str, *, timeout: float | None = None) -> Question:
        """Long-poll until the question is answered or cancelled (or `timeout` passes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = calls.MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            wait = int(max(0, min(calls.MAX_WAIT_SECONDS, left)))
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
        with self._lock:
            self._state.unit = detail.unit
        return detail
