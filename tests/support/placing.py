"""Helpers for the database tests: put a unit in any state, and photograph the ledger."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest

from work_ledger.domain.model import Actor, Attempt, Disposition, NewUnit, State, Unit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


@dataclass
class Placed:
    """A unit brought to a state, with its last attempt and the agent that worked on it."""

    unit: Unit
    attempt: Attempt | None
    agent: Actor


class UnitFactory:
    """Brings fresh units to any state of DESIGN §4 through the service."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def place(self, state: State, *, fleet: str = "fleet-a") -> Placed:
        tag = uuid.uuid4().hex[:8]
        ref, agent = f"unit-{state}-{tag}", Actor(f"agent-{tag}")
        if state is State.WAITING:  # on a prerequisite that is not finished
            units = [
                NewUnit(f"{ref}-lib", fleet, "libs"),
                NewUnit(ref, fleet, "orders", requires=(f"{ref}-lib",)),
            ]
            await self.ledger.register(units, OPERATOR)
            return Placed((await self.ledger.get_unit(ref)).unit, None, agent)
        await self.ledger.register([NewUnit(ref, fleet, "orders")], OPERATOR)
        if state is State.READY:
            return Placed((await self.ledger.get_unit(ref)).unit, None, agent)
        if state is State.ABANDONED:
            unit = await self.ledger.dispose(ref, Disposition.DROPPED, OPERATOR)
            return Placed(unit, None, agent)
        claim = await self.ledger.claim_named(ref, agent.name)
        assert claim.unit is not None
        assert claim.attempt is not None
        unit, attempt = claim.unit, claim.attempt
        if state is not State.CLAIMED:
            unit, attempt = await self.ledger.start(ref, agent, attempt_id=attempt.id)
        if state is State.BLOCKED:
            unit, _ = await self.ledger.block(ref, agent, "which currency?")
        if state in (State.VERIFIED, State.DONE):
            unit, attempt = await self.ledger.verify(ref, agent, "https://ci.example/run/1")
        if state is State.DONE:
            unit = await self.ledger.dispose(ref, Disposition.MIGRATED, agent)
        assert unit.state is state
        return Placed(unit, attempt, agent)


@pytest.fixture
def units(ledger: Ledger) -> UnitFactory:
    return UnitFactory(ledger)


Snapshot = Callable[[], Awaitable[tuple[object, ...]]]


@pytest.fixture
def snapshot(raw: asyncpg.Connection) -> Snapshot:
    """Photographs what a refused write must leave untouched: every row of every table."""

    async def take() -> tuple[object, ...]:
        return await _snapshot(raw)

    return take


async def _snapshot(conn: asyncpg.Connection) -> tuple[object, ...]:
    row = await conn.fetchrow(
        """
        SELECT (SELECT coalesce(array_agg(u::text ORDER BY u.id), '{}')
                FROM work_units AS u) AS units,
               (SELECT coalesce(array_agg(a::text ORDER BY a.id), '{}')
                FROM work_unit_attempts AS a) AS attempts,
               (SELECT coalesce(array_agg(q::text ORDER BY q.id), '{}')
                FROM blocking_questions AS q) AS questions,
               (SELECT count(*) FROM work_unit_events) AS events
        """
    )
    assert row is not None
    return tuple(row)
