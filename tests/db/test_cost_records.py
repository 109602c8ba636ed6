"""Cost records: each is kept, and the attempt's and unit's cost are their sums, which
raw SQL cannot break."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from work_ledger.domain.model import Actor, NewUnit
from work_ledger.domain.shape import CostRecord
from work_ledger.errors import InvalidInput
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
AGENT = Actor("agent-1")


async def _attempt(ledger: Ledger) -> uuid.UUID:
    await ledger.register([NewUnit("u", "f", "d")], OPERATOR)
    claim = await ledger.claim(AGENT.name)
    assert claim.attempt is not None
    return claim.attempt.id


async def test_records_are_kept_and_summed(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """Records of several models sum into the attempt and unit; v_cost_by_model adds them up."""
    attempt_id = await _attempt(ledger)
    await ledger.record_cost(attempt_id, CostRecord(30, "opus", 100, 20, estimated=True), AGENT)
    await ledger.record_cost(attempt_id, CostRecord(0, "haiku", output_tokens=5), AGENT)
    unit, attempt = await ledger.record_cost(attempt_id, 12, AGENT)
    assert (unit.cost_cents, attempt.cost_cents) == (42, 42)
    assert await raw.fetchval("SELECT count(*) FROM cost_records") == 3
    rows = await raw.fetch(
        "SELECT model, cost_cents, estimated_cents, input_tokens, output_tokens"
        " FROM v_cost_by_model"
    )
    assert [tuple(r) for r in rows] == [
        (None, 12, None, None, None),
        ("haiku", 0, None, None, 5),
        ("opus", 30, 30, 100, 20),
    ]


async def test_an_empty_record_is_refused(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """0 cents and no tokens is refused by the service and by the database."""
    attempt_id = await _attempt(ledger)
    with pytest.raises(InvalidInput):
        await ledger.record_cost(attempt_id, CostRecord(0, "opus"), AGENT)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "INSERT INTO cost_records (attempt_id, unit_id, cost_cents)"
            " SELECT id, unit_id, 0 FROM work_unit_attempts"
        )
    assert refused.value.constraint_name == "cost_record_not_empty"


@pytest.mark.parametrize(
    ("statements", "rule"),
    [
        (
            [
                "INSERT INTO cost_records (attempt_id, unit_id, cost_cents)"
                " SELECT id, unit_id, 5 FROM work_unit_attempts"
            ],
            "attempt_cost_equals_cost_records",
        ),
        (
            [
                "UPDATE work_unit_attempts SET cost_cents = cost_cents + 5",
                "UPDATE work_units SET cost_cents = cost_cents + 5",
            ],
            "attempt_cost_equals_cost_records",
        ),
        (["UPDATE cost_records SET cost_cents = 1"], "cost_records_append_only"),
        (["DELETE FROM cost_records"], "cost_records_append_only"),
    ],
)
async def test_raw_sql_cannot_break_the_sums(
    ledger: Ledger, raw: asyncpg.Connection, statements: list[str], rule: str
) -> None:
    """A record without its cost, a cost without its record, or a changed record: refused."""
    attempt_id = await _attempt(ledger)
    await ledger.record_cost(attempt_id, 9, AGENT)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await _in_one_transaction(raw, statements)
    assert refused.value.constraint_name == rule
    assert await raw.fetchval("SELECT sum(cost_cents) FROM cost_records") == 9


async def _in_one_transaction(raw: asyncpg.Connection, statements: list[str]) -> None:
    async with raw.transaction():
        for statement in statements:
            await raw.execute(statement)
