"""A lease's history read back from the event log: each heartbeat came in time."""

from __future__ import annotations

import datetime as dt
import time

from work_ledger.client import Client

# A lease long enough for a busy machine: heartbeats at a tenth of it leave nine of their
# intervals of slack before it would lapse.
LEASE_SECONDS = 4
HEARTBEAT_FRACTION = 0.1


def sleep_past(moment: dt.datetime, margin: float = 0.5) -> None:
    """Sleep until the wall clock (which the server shares) is past `moment`."""
    left = (moment - dt.datetime.now(dt.UTC)).total_seconds() + margin
    if left > 0:
        time.sleep(left)


def renewals_in_time(client: Client, unit: str, expiry: dt.datetime) -> int:
    """Heartbeats that renewed the lease held since `expiry`; each must have come before
    the lease it renewed ran out, and no stale reclaim may have happened."""
    events = sorted(client.list_events(unit, limit=500).items, key=lambda e: e.id)
    assert "stale_reclaimed" not in {e.event_type for e in events}
    beats = [e for e in events if e.event_type == "heartbeat"]
    for beat in beats:
        assert beat.created_at is not None
        assert beat.created_at < expiry, (beat, expiry)
        expiry = max(expiry, dt.datetime.fromisoformat(beat.detail["lease_expires_at"]))
    return len(beats)
