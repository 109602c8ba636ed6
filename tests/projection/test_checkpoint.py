"""The follower's checkpoint in the ledger database (migration 0009), with raw SQL."""

from __future__ import annotations

import datetime as dt

import asyncpg
import pytest

from support.projection_streams import register_workflows
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.ingest import Projector, WorkflowEvent

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


async def test_checkpoint_only_advances(database_url: str) -> None:
    """advance() keeps the later of two marks; none yet reads as None."""
    state = FollowState(database_url)
    assert await state.checkpoint("ns") is None
    assert await state.advance("ns", T0 + dt.timedelta(minutes=5)) == T0 + dt.timedelta(minutes=5)
    assert await state.advance("ns", T0) == T0 + dt.timedelta(minutes=5)
    assert await state.checkpoint("ns") == T0 + dt.timedelta(minutes=5)
    assert await state.checkpoint("other") is None


async def test_database_refuses_moving_a_checkpoint_back(raw: asyncpg.Connection) -> None:
    """A direct UPDATE that moves the mark back is refused by name."""
    await raw.execute(
        "INSERT INTO temporal_follow_checkpoints (namespace, swept_until) VALUES ('ns', $1)", T0
    )
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "UPDATE temporal_follow_checkpoints SET swept_until = $1", T0 - dt.timedelta(1)
        )
    assert refused.value.constraint_name == "temporal_follow_checkpoint_only_advances"


async def test_held_workflows_are_those_the_projection_holds(
    ledger: Ledger, projector: Projector, database_url: str
) -> None:
    """Only units held by temporal:<their own workflow_id> are listed."""
    await register_workflows(ledger, "wf-a", "wf-b")
    await projector.project([WorkflowEvent("wf-a", "started", T0, run_id="r-1", event_id=1)])
    assert await FollowState(database_url).held_workflows() == ["wf-a"]
