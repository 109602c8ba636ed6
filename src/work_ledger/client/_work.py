"""What the sync and async `Work` share: the claim's state, its lease and its end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from work_ledger.client._sending import MAX_WAIT_SECONDS
from work_ledger.client.models import Attempt, Claim, Step, Unit
from work_ledger.errors import AttemptSuperseded, WorkLedgerError

DEFAULT_LEASE_SECONDS = 900


def lease_of(unit: Unit, lease_seconds: int | None) -> int:
    """The lease to renew at each heartbeat: the one asked for, else the one granted."""
    if lease_seconds is not None:
        return lease_seconds
    if unit.lease_expires_at is not None and unit.last_heartbeat_at is not None:
        granted = (unit.lease_expires_at - unit.last_heartbeat_at).total_seconds()
        if granted >= 1:
            return round(granted)
    return DEFAULT_LEASE_SECONDS


@dataclass(slots=True)
class WorkState:
    unit: Unit
    attempt: Attempt
    lease_seconds: int
    live: bool = True
    lost: WorkLedgerError | None = None

    def update(self, unit: Unit, attempt: Attempt) -> None:
        """Take a newer view of the unit; an older one (a heartbeat answered late) is ignored."""
        if (
            unit.updated_at is not None
            and self.unit.updated_at is not None
            and unit.updated_at < self.unit.updated_at
        ):
            return
        self.unit, self.attempt = unit, attempt

    def end(self) -> None:
        self.live = False

    def lose(self, exc: WorkLedgerError) -> None:
        self.live = False
        self.lost = exc

    def check(self) -> None:
        """Raise why the claim was lost: a lost claim is a stop signal, never retried."""
        if self.lost is not None:
            raise self.lost


def deadline_of(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def next_wait(deadline: float | None) -> int:
    """Seconds of the next long-poll: the server's maximum, or what is left before `deadline`."""
    left = MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
    return int(max(0, min(MAX_WAIT_SECONDS, left)))


class WorkBase:
    """The sync and async `Work` without the I/O: the claim's state, its lease and its end."""

    def __init__(
        self,
        claim: Claim,
        *,
        lease_seconds: int | None,
        heartbeat_fraction: float,
        on_lost: Callable[[WorkLedgerError], None] | None,
    ) -> None:
        assert claim.unit is not None
        assert claim.attempt is not None
        self.resumed = claim.resumed
        self.on_lost = on_lost
        self._state = WorkState(claim.unit, claim.attempt, lease_of(claim.unit, lease_seconds))
        self.interval = max(0.1, self._state.lease_seconds * heartbeat_fraction)
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

    def _release_reason(self, exc: BaseException) -> str | None:
        """Why to release the unit when the block raised `exc`; None when the claim is gone."""
        if self._state.live and not isinstance(exc, AttemptSuperseded):
            return f"{type(exc).__name__}: {exc}"[:2000]
        return None

    def _beat_failed(self, exc: WorkLedgerError) -> None:
        """A heartbeat refused: the claim is lost (told once to `on_lost`)."""
        if self._state.live:
            self._state.lose(exc)
            if self.on_lost is not None:
                self.on_lost(exc)

    def _stepped(self, step: Step) -> Step:
        with self._lock:
            self._state.update(step.unit, step.attempt)
        return step

    def _ended(self, step: Step) -> Step:
        # The fenced write that ended the attempt was accepted, so the claim was held until
        # it: a heartbeat refused meanwhile (sent before it, answered after it committed)
        # lost nothing, and must not stop the unit's remaining writes (dispose).
        self._state.end()
        self._state.lost = None
        return self._stepped(step)

    def _took_unit(self, unit: Unit) -> None:
        with self._lock:
            self._state.unit = unit

    def _took_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._state.attempt = attempt
