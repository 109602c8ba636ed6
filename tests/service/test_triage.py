"""Routing a question to the human queue: set once, in the database and through the service,
and under real races between triage workers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Question, QuestionStatus, State
from work_ledger.errors import InvalidInput, InvariantViolation, NotFound
from work_ledger.service.ledger import Ledger
from work_ledger.service.triage import route_question

ROUNDS = 20
OPERATOR = Actor("operator", privileged=True)


async def _asked(units: Any, ledger: Ledger) -> Question:
    placed = await units.place(State.BLOCKED)
    detail = await ledger.get_unit(str(placed.unit.id))
    return detail.questions[-1]


async def _events(raw: asyncpg.Connection, question: Question) -> list[asyncpg.Record]:
    return await raw.fetch(
        "SELECT agent_id, detail FROM work_unit_events"
        " WHERE event_type = 'routed' AND detail->>'question_id' = $1",
        str(question.id),
    )


async def test_route_question_sets_the_id_and_appends_one_event(
    units: Any, ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Routing records external_task_id and a `routed` event; the same id again is a no-op."""
    question = await _asked(units, ledger)
    routed = await route_question(ledger.store, question.id, "HQ-1", "triage-1")
    again = await route_question(ledger.store, question.id, "HQ-1", "triage-2")
    assert (routed.external_task_id, routed.status) == ("HQ-1", QuestionStatus.OPEN)
    assert routed == again
    events = await _events(raw, question)
    assert [(e["agent_id"], e["detail"]["external_task_id"]) for e in events] == [
        ("triage-1", "HQ-1")
    ]
    assert await ledger.audit() == []


async def test_route_question_another_id_is_refused_naming_the_first(
    units: Any, ledger: Ledger, snapshot: Any
) -> None:
    """A second id is a 409 `question_routed_once` that names the id already recorded."""
    question = await _asked(units, ledger)
    await route_question(ledger.store, question.id, "HQ-1", "triage-1")
    before = await snapshot()
    with pytest.raises(InvariantViolation) as refused:
        await route_question(ledger.store, question.id, "HQ-2", "triage-2")
    assert refused.value.invariant == "question_routed_once"
    assert refused.value.extra["external_task_id"] == "HQ-1"
    assert "'HQ-1'" in refused.value.detail
    assert "close 'HQ-2'" in refused.value.detail
    assert before == await snapshot()


async def test_route_question_closed_before_routing_is_refused(units: Any, ledger: Ledger) -> None:
    """An answered or cancelled question that was never routed is not routed."""
    answered = await _asked(units, ledger)
    await ledger.unblock(str(answered.unit_id), "yes", OPERATOR)
    cancelled = await _asked(units, ledger)
    await ledger.cancel_question(cancelled.id, OPERATOR)
    for question, status in ((answered, "answered"), (cancelled, "cancelled")):
        with pytest.raises(InvariantViolation) as refused:
            await route_question(ledger.store, question.id, "HQ-9", "triage-1")
        assert refused.value.invariant == "question_routed_while_open"
        assert status == refused.value.extra["question_status"]


async def test_route_question_routed_then_answered_same_id_is_still_a_no_op(
    units: Any, ledger: Ledger
) -> None:
    """A retry after the answer arrived gets the (closed) question back, unchanged."""
    question = await _asked(units, ledger)
    await route_question(ledger.store, question.id, "HQ-1", "triage-1")
    await ledger.unblock(str(question.unit_id), "yes", OPERATOR)
    again = await route_question(ledger.store, question.id, "HQ-1", "triage-1")
    assert (again.status, again.external_task_id) == (QuestionStatus.ANSWERED, "HQ-1")


async def test_route_question_unknown_or_bad_id(units: Any, ledger: Ledger) -> None:
    """An unknown question is a NotFound; an empty or overlong external id is bad input."""
    with pytest.raises(NotFound):
        await route_question(ledger.store, uuid.uuid4(), "HQ-1", "triage-1")
    question = await _asked(units, ledger)
    for bad in ("", "x" * 257):
        with pytest.raises(InvalidInput):
            await route_question(ledger.store, question.id, bad, "triage-1")


async def test_list_questions_filters_routed_and_unrouted(units: Any, ledger: Ledger) -> None:
    """routed=False lists triage's to-do, routed=True the routed ones, None both."""
    first, second = await _asked(units, ledger), await _asked(units, ledger)
    await route_question(ledger.store, first.id, "HQ-1", "triage-1")

    async def ids(routed: bool | None) -> list[uuid.UUID]:
        page = await ledger.list_questions(status=QuestionStatus.OPEN, routed=routed)
        return [q.id for q in page.items]

    assert [second.id] == await ids(False)
    assert [first.id] == await ids(True)
    assert [first.id, second.id] == await ids(None)


# -- the database's own guard, with raw SQL -------------------------------------------------


async def _refused_routing(
    raw: asyncpg.Connection, question: Question, value: str | None
) -> str | None:
    """The constraint that refuses setting external_task_id to `value` with raw SQL."""
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "UPDATE blocking_questions SET external_task_id = $2 WHERE id = $1", question.id, value
        )
    constraint: str | None = refused.value.constraint_name
    return constraint


async def test_raw_sql_cannot_change_or_clear_a_routed_id(
    units: Any, ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Once set, external_task_id never changes, not even to null."""
    question = await _asked(units, ledger)
    await raw.execute(
        "UPDATE blocking_questions SET external_task_id = 'HQ-1' WHERE id = $1", question.id
    )
    for value in ("HQ-2", None):
        assert await _refused_routing(raw, question, value) == "question_routed_once"
    same = "UPDATE blocking_questions SET external_task_id = 'HQ-1' WHERE id = $1"
    assert await raw.execute(same, question.id) == "UPDATE 1"


async def test_raw_sql_cannot_route_a_closed_question(
    units: Any, ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Neither a closed question nor the update that closes it may set the id."""
    closed = await _asked(units, ledger)
    await ledger.unblock(str(closed.unit_id), "yes", OPERATOR)
    open_one = await _asked(units, ledger)
    attempts = (
        ("UPDATE blocking_questions SET external_task_id = 'HQ-1' WHERE id = $1", closed.id),
        (
            "UPDATE blocking_questions SET external_task_id = 'HQ-1', status = 'cancelled',"
            " closed_at = now() WHERE id = $1",
            open_one.id,
        ),
    )
    for sql, question_id in attempts:
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await raw.execute(sql, question_id)
        assert refused.value.constraint_name == "question_routed_while_open"


async def test_raw_sql_external_id_is_bounded(
    units: Any, ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """An empty or overlong external_task_id is refused by a CHECK."""
    question = await _asked(units, ledger)
    for bad in ("", "x" * 257):
        assert await _refused_routing(raw, question, bad) == "question_external_task_id_bounded"


# -- two triage workers, each on a connection of its own ------------------------------------


@pytest.fixture
async def workers(database_url: str) -> AsyncIterator[list[Store]]:
    pools = await asyncio.gather(
        *(create_pool(database_url, min_size=1, max_size=1) for _ in range(2))
    )
    yield [Store(p) for p in pools]
    await asyncio.gather(*(p.close() for p in pools))


async def _attempt(store: Store, question: Question, external: str) -> str:
    try:
        await route_question(store, question.id, external, external)
    except InvariantViolation as exc:
        return f"refused: {exc.invariant}"
    return "routed"


async def test_route_two_workers_race_with_different_ids_exactly_one_wins(
    units: Any, ledger: Ledger, raw: asyncpg.Connection, workers: list[Store]
) -> None:
    """Two workers route one question under different ids at once: one wins, one event."""
    for _ in range(ROUNDS):
        question = await _asked(units, ledger)
        results = await asyncio.gather(
            _attempt(workers[0], question, "HQ-a"), _attempt(workers[1], question, "HQ-b")
        )
        assert sorted(results) == ["refused: question_routed_once", "routed"]
        winner = "HQ-a" if results[0] == "routed" else "HQ-b"
        stored = await ledger.get_question(question.id)
        assert winner == stored.external_task_id
        events = await _events(raw, question)
        assert [winner] == [e["detail"]["external_task_id"] for e in events]


async def test_route_two_workers_race_with_the_same_id_route_once(
    units: Any, ledger: Ledger, raw: asyncpg.Connection, workers: list[Store]
) -> None:
    """Two workers that derived the same id both succeed, and only one event is appended."""
    for _ in range(ROUNDS):
        question = await _asked(units, ledger)
        results = await asyncio.gather(
            *(route_question(w, question.id, "HQ-same", "triage") for w in workers)
        )
        assert {"HQ-same"} == {q.external_task_id for q in results}
        assert len(await _events(raw, question)) == 1
