"""The claim waiters' queue: bounded wake-ups, passed on by claims, handed on when unused."""

from __future__ import annotations

import asyncio

from work_ledger.api.longpoll import ClaimQueue


async def test_wake_rouses_only_the_first_waiters() -> None:
    """A wake-up for one batch leaves the rest of the queue asleep, oldest first."""
    queue = ClaimQueue()
    turns = [queue.enter() for _ in range(30)]
    queue.wake(8)
    assert [t.done() for t in turns] == [True] * 8 + [False] * 22
    assert len(queue) == 22


async def test_a_claim_passes_a_turn_on() -> None:
    """A waiter that claimed wakes the next one: more units may be claimable."""
    queue = ClaimQueue()
    first, second, third = queue.enter(), queue.enter(), queue.enter()
    queue.wake(1)
    queue.leave(first, claimed=True, looking_again=False)
    assert (second.done(), third.done()) == (True, False)


async def test_an_unused_turn_is_handed_on() -> None:
    """A woken waiter that leaves without looking again hands its turn to the next."""
    queue = ClaimQueue()
    first, second = queue.enter(), queue.enter()
    queue.wake(1)
    queue.leave(first, claimed=False, looking_again=False)
    assert second.done()


async def test_a_used_or_ungiven_turn_wakes_nobody() -> None:
    """Looking again uses the turn; leaving while still queued wakes nobody."""
    queue = ClaimQueue()
    first, second, third = queue.enter(), queue.enter(), queue.enter()
    queue.wake(1)
    queue.leave(first, claimed=False, looking_again=True)
    queue.leave(second, claimed=False, looking_again=False)
    assert (second.cancelled(), third.done(), len(queue)) == (True, False, 1)
    await asyncio.sleep(0)
