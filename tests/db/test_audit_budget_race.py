"""`audit`'s claim_within_budget gives a claim the cap it could have read.

A claim event's `created_at` is its transaction's start; the claim statement reads the
budget later, once the idempotency key is reserved. A cap raised in between is the cap the
claim read, so the claim is within its budget. audit once took the cap in force at the
transaction's start and reported such a claim (seen in tests/faults/test_shape_history.py
right after the operator raised a spent cap: long-polls wake and claim at once).
"""

from __future__ import annotations

import asyncio

import asyncpg

from work_ledger.db.connect import connect
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
GRACE = 5.0  # audit's grace for spend a claim could not see (docs/work-shape.md)


async def test_a_claim_that_read_a_cap_raised_during_its_transaction_is_within_budget(
    ledger: Ledger, database_url: str, raw: asyncpg.Connection
) -> None:
    """The raised cap excuses the claim that read it, and only that one: a claim event
    written (raw SQL) after the cap was lowered again is reported."""
    await ledger.register([NewUnit("spender", "f", "d"), NewUnit("next", "f", "d")], OPERATOR)
    await ledger.set_budget("f", 100, OPERATOR, domain="d")
    claim = await ledger.claim("agent-1")
    assert claim.attempt is not None
    await ledger.record_cost(claim.attempt.id, 150, Actor("agent-1"))  # spent: 150 of 100
    await asyncio.sleep(GRACE + 0.5)  # beyond audit's grace for racing cost records

    conn = await connect(database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("SELECT 1")  # the claim's transaction has begun (now() is set)
        await asyncio.sleep(0.05)
        await ledger.set_budget("f", 1_000, OPERATOR, domain="d")  # committed meanwhile
        late = await ledger.on(Store(ledger.store.pool).on(conn)).claim("agent-2")
        await tx.commit()
    finally:
        await conn.close()
    assert late.unit is not None  # it read the new cap
    assert late.unit.external_ref == "next"
    assert [v for v in await ledger.audit() if v.rule == "claim_within_budget"] == []

    await ledger.set_budget("f", 100, OPERATOR, domain="d")  # spent again: 150 of 100
    await raw.execute(
        "INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id)"
        " SELECT id, 'claimed', 'ready', 'claimed', 'forger' FROM work_units"
        " WHERE external_ref = 'spender'"
    )
    reported = [v for v in await ledger.audit() if v.rule == "claim_within_budget"]
    assert [v.external_ref for v in reported] == ["spender"]
