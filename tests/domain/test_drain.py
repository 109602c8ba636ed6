"""Notifier.drain (SIGTERM): every long-poll waiter wakes at once, claims and questions alike."""

from __future__ import annotations

from work_ledger.api.longpoll import Notifier


async def test_drain_wakes_every_waiter_of_every_kind() -> None:
    """Claim waiters of every domain queue (past the wake-up batch), list-question waiters
    and waiters on one question all wake; none would otherwise before FALLBACK_SECONDS."""
    notifier = Notifier("postgresql://unused")  # never started: no database needed
    turns = [notifier.claims(domain).enter() for domain in ("orders", None) for _ in range(20)]
    changed = notifier.questions_changed()
    async with notifier.question("q-1") as closed:
        assert not notifier.draining
        assert not any(t.done() for t in turns)
        assert not changed.is_set()
        assert not closed.is_set()

        notifier.drain()

        assert notifier.draining
        assert all(t.done() for t in turns)
        assert changed.is_set()
        assert closed.is_set()
