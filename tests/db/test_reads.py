"""Keyset reads: every row once, in order, across pages; filters; foreign cursors refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from work_ledger.domain.model import Actor, NewUnit, Page, QuestionStatus, State
from work_ledger.errors import InvalidInput
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def _all_pages(
    read: Callable[[str | None], Awaitable[Page[Any]]],
) -> AsyncIterator[list[Any]]:
    cursor: str | None = None
    while True:
        page = await read(cursor)
        yield page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def test_list_units_pages_through_every_unit_once_in_order(ledger: Ledger) -> None:
    """Pages of 3 over 7 units: 3, 3, 1, oldest first, then no cursor."""
    refs = [f"u-{i}" for i in range(7)]
    await ledger.register([NewUnit(r, "fleet-a") for r in refs], OPERATOR)
    pages = [
        [u.external_ref for u in items]
        async for items in _all_pages(lambda c: ledger.list_units(limit=3, cursor=c))
    ]
    assert pages == [refs[0:3], refs[3:6], refs[6:7]]


async def test_list_units_filters_by_state_and_fleet(ledger: Ledger) -> None:
    """state and fleet narrow the list; the filters combine."""
    await ledger.register(
        [NewUnit("a-1", "fleet-a"), NewUnit("a-2", "fleet-a"), NewUnit("b-1", "fleet-b")],
        OPERATOR,
    )
    await ledger.claim_named("a-2", "agent-1")
    claimed = await ledger.list_units(state=State.CLAIMED)
    ready_a = await ledger.list_units(state=State.READY, fleet="fleet-a")
    assert [u.external_ref for u in claimed.items] == ["a-2"]
    assert [u.external_ref for u in ready_a.items] == ["a-1"]
    assert claimed.next_cursor is None


async def test_list_events_pages_newest_first(ledger: Ledger) -> None:
    """A unit's events come newest first across pages, each exactly once."""
    await ledger.register([NewUnit("u-1", "fleet-a")], OPERATOR)
    claim = await ledger.claim("agent-1")
    assert claim.attempt is not None
    for _ in range(3):
        await ledger.heartbeat(claim.attempt.id, Actor("agent-1"))
    pages = [
        [e.event_type for e in items]
        async for items in _all_pages(
            lambda c: ledger.list_events(unit_ref="u-1", limit=2, cursor=c)
        )
    ]
    assert pages == [["heartbeat", "heartbeat"], ["heartbeat", "claimed"], ["registered"]]


async def test_list_questions_filters_by_status(ledger: Ledger) -> None:
    """Open and answered questions are listed apart, oldest first."""
    await ledger.register([NewUnit(f"u-{i}", "fleet-a") for i in range(3)], OPERATOR)
    for i in range(3):
        agent = Actor(f"agent-{i}")
        await ledger.claim_named(f"u-{i}", agent.name)
        await ledger.start(f"u-{i}", agent)
        await ledger.block(f"u-{i}", agent, f"question {i}?")
    await ledger.unblock("u-1", "yes", OPERATOR)
    open_ = await ledger.list_questions(status=QuestionStatus.OPEN, limit=1)
    rest = await ledger.list_questions(status=QuestionStatus.OPEN, cursor=open_.next_cursor)
    answered = await ledger.list_questions(status=QuestionStatus.ANSWERED)
    assert [q.question for q in open_.items + rest.items] == ["question 0?", "question 2?"]
    assert [(q.question, q.answer) for q in answered.items] == [("question 1?", "yes")]


@pytest.mark.parametrize("cursor", ["not-a-cursor", "bm90fGE"])
async def test_reads_refuse_a_cursor_they_did_not_issue(ledger: Ledger, cursor: str) -> None:
    """A made-up cursor is InvalidInput, never a server error."""
    with pytest.raises(InvalidInput):
        await ledger.list_units(cursor=cursor)
    with pytest.raises(InvalidInput):
        await ledger.list_questions(cursor=cursor)
    with pytest.raises(InvalidInput):
        await ledger.list_events(cursor=cursor)
