"""The attempt limit in the database: raw SQL cannot pass the allowance, and a release
racing a stale reclaim of the last allowed attempt parks the unit once, with one question."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from support.racing import racing_ledgers
from work_ledger.domain.model import Actor, NewUnit, Outcome, State
from work_ledger.errors import WorkLedgerError
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
ROUNDS = 20


async def test_raw_sql_cannot_pass_the_allowance(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """Failed attempts never pass the allowance, never shrink, and a claim at the limit is
    refused by the guard itself."""
    await ledger.register([NewUnit("u", "f", max_attempts=1)], OPERATOR)
    claim = await ledger.claim("agent-1")
    assert claim.unit is not None
    await ledger.release("u", Actor("agent-1"), outcome=Outcome.FAILED)
    assert (await ledger.get_unit("u")).unit.state is State.WAITING
    for statement, rule in [
        ("UPDATE work_units SET failed_attempts = 5", "unit_attempts_within_allowance"),
        ("UPDATE work_units SET failed_attempts = 0", "unit_shape_fixed"),
        ("UPDATE work_units SET attempts_allowed = 9", "unit_allowance_by_answer"),
        ("UPDATE work_units SET max_attempts = 9", "unit_shape_fixed"),
    ]:
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await raw.execute(statement)
        assert refused.value.constraint_name == rule
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await _in_one_transaction(
            raw,
            "UPDATE blocking_questions SET status = 'cancelled', closed_at = now()",
            "UPDATE work_units SET state = 'ready'",
            "UPDATE work_units SET state = 'claimed', claimed_by = 'x', attempt_count = 2,"
            " lease_expires_at = now() + interval '1 minute'",
        )
    assert refused.value.constraint_name == "attempt_limit_reached"


async def _in_one_transaction(raw: asyncpg.Connection, *statements: str) -> None:
    async with raw.transaction():
        for statement in statements:
            await raw.execute(statement)


async def test_release_racing_a_stale_reclaim_parks_once(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """The holder releases (failed) its last allowed attempt just as another agent reclaims
    the lapsed lease: the unit is parked exactly once, with exactly one question."""
    async with racing_ledgers(database_url, 2) as (holder_ledger, other_ledger):
        for round_no in range(ROUNDS):
            ref, agent = f"poison-{round_no}", Actor(f"holder-{round_no}")
            await holder_ledger.register(
                [NewUnit(ref, "f", f"d{round_no}", max_attempts=1)], OPERATOR
            )
            await holder_ledger.claim_named(ref, agent.name)
            await raw.execute(
                "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
                " WHERE external_ref = $1",
                ref,
            )
            released, claim = await asyncio.gather(
                holder_ledger.release(ref, agent, outcome=Outcome.FAILED, reason="crashed"),
                other_ledger.claim(f"other-{round_no}", domain=f"d{round_no}"),
                return_exceptions=True,
            )
            assert not isinstance(claim, BaseException), claim
            assert claim.unit is None
            assert isinstance(released, WorkLedgerError | tuple)
            shown = await holder_ledger.get_unit(ref)
            assert shown.unit.state is State.WAITING
            assert shown.unit.failed_attempts == 1
            assert [q.asked_by for q in shown.questions] == ["work-ledger"]
            parked = await raw.fetchval(
                "SELECT count(*) FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id"
                " WHERE u.external_ref = $1 AND e.to_state = 'waiting'",
                ref,
            )
            assert parked == 1
        assert await holder_ledger.audit() == []


async def test_audit_catches_a_claim_past_the_allowance(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """An event log that shows a claim after the last allowed failure is reported."""
    await ledger.register([NewUnit("u", "f", max_attempts=1)], OPERATOR)
    claim = await ledger.claim("agent-1")
    assert claim.unit is not None
    await ledger.release("u", Actor("agent-1"), outcome=Outcome.FAILED)
    await raw.execute(
        "INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id)"
        " SELECT id, 'claimed', 'ready', 'claimed', 'forger' FROM work_units"
    )
    rules = {v.rule for v in await ledger.audit()}
    assert "attempts_within_allowance" in rules
