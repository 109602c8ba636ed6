"""What the sync and async `Work` share: the claim's state and its lease arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

from work_ledger.client.models import Attempt, Unit
from work_ledger.errors import WorkLedgerError

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
