"""Malformed input to the service: InvalidInput naming what to send instead, nothing written."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from work_ledger.domain.model import Actor, NewUnit, Outcome, State
from work_ledger.errors import InvalidInput, WorkLedgerError
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
Snapshot = Callable[[], Awaitable[tuple[object, ...]]]


async def test_bad_input_is_refused_and_writes_nothing(
    ledger: Ledger, units: Any, snapshot: Snapshot
) -> None:
    """Out-of-bounds leases, batches, costs, evidence and outcomes: InvalidInput, no change."""
    placed = await units.place(State.IN_PROGRESS)
    ref, agent = placed.unit.external_ref, placed.agent
    assert placed.attempt is not None
    before = await snapshot()
    writes: list[tuple[Awaitable[Any], str]] = [
        (ledger.claim("agent-x", lease_seconds=0), "lease_seconds"),
        (ledger.claim("agent-x", lease_seconds=86401), "lease_seconds"),
        (ledger.heartbeat(placed.attempt.id, agent, lease_seconds=-5), "lease_seconds"),
        (ledger.register([], OPERATOR), "between 1 and 1000"),
        (ledger.register([NewUnit(f"r-{i}", "f") for i in range(1001)], OPERATOR), "1000"),
        (ledger.register([NewUnit("dup", "f"), NewUnit("dup", "f")], OPERATOR), "twice"),
        (ledger.record_cost(placed.attempt.id, 0, agent), "positive"),
        (ledger.record_cost(placed.attempt.id, -10, agent), "positive"),
        (ledger.verify(ref, agent, "the tests passed"), "http(s) link"),
        (ledger.verify(ref, agent, "https://ci.example/" + "a" * 2048), "http(s) link"),
        (ledger.verify(ref, agent, "https:///no-host"), "http(s) link"),
        (ledger.release(ref, agent, outcome=Outcome.VERIFIED), "failed' or 'abandoned"),
        (ledger.list_units(cursor="%%%"), "cursor"),
    ]
    for write, says in writes:
        with pytest.raises(InvalidInput) as refused:
            await write
        assert says in refused.value.detail
        assert await snapshot() == before


async def test_oversized_or_nul_text_is_a_ledger_error_not_a_crash(
    ledger: Ledger, snapshot: Snapshot
) -> None:
    """A too-long external_ref or a NUL byte is refused as a ledger error; nothing written."""
    before = await snapshot()
    for ref in ("x" * 257, "nul\x00byte", ""):
        with pytest.raises(WorkLedgerError):
            await ledger.register([NewUnit(ref, "fleet-a")], OPERATOR)
    assert await snapshot() == before
