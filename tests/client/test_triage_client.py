"""The SDK's triage calls (sync and async) against a real running server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from support.wl_server import LedgerServer
from work_ledger.client import AsyncClient, Client
from work_ledger.errors import InvariantViolation


def _blocked(operator: Client, agent: Client, ref: str) -> str:
    """Register `ref`, claim it as `agent` and block it: the unit's id."""
    operator.register([{"external_ref": ref, "fleet": "f", "domain": "orders"}])
    claim = agent.claim_next(domain="orders")
    assert claim.unit is not None
    agent.start(claim.unit.id)
    agent.block(claim.unit.id, "keep the v1 route?")
    return claim.unit.id


def test_sync_triage_loop_polls_routes_and_answers(
    operator: Client, agent: Client, make_client: Callable[..., Client]
) -> None:
    """unrouted_questions → route_question → unblock; a second id is refused naming the first."""
    triage = make_client("triage", "triage-1")
    unit_id = _blocked(operator, agent, "orders/1")
    (question,) = triage.unrouted_questions(wait_seconds=5).items
    routed = triage.route_question(question.id, "HQ-7")
    assert (routed.unit_id, routed.external_task_id) == (unit_id, "HQ-7")
    assert triage.route_question(question.id, "HQ-7") == routed
    assert triage.unrouted_questions().items == []
    assert [q.id for q in triage.list_questions(status="open", routed=True).items] == [question.id]
    with pytest.raises(InvariantViolation) as refused:
        triage.route_question(question.id, "HQ-8")
    assert (refused.value.invariant, refused.value.extra["external_task_id"]) == (
        "question_routed_once",
        "HQ-7",
    )
    answered = triage.unblock(unit_id, "yes, until Q3").question
    assert (answered.status, answered.external_task_id) == ("answered", "HQ-7")


async def test_async_triage_loop_polls_and_routes(
    operator: Client, agent: Client, ledger_server: LedgerServer
) -> None:
    """The asyncio client: the same two calls."""
    _blocked(operator, agent, "orders/2")
    async with AsyncClient(ledger_server.url, ledger_server.token("triage", "t-2")) as triage:
        (question,) = (await triage.unrouted_questions(assignee_group_slug="agent-questions")).items
        routed = await triage.route_question(question.id, "HQ-9")
        assert routed.external_task_id == "HQ-9"
        assert (await triage.unrouted_questions()).items == []
