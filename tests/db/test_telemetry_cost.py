"""Claude Code's telemetry as cost (DESIGN §13): each api_request record counts once, cents
per (attempt, model) are ceil of the decimal sum, and the final result adds only what
telemetry did not already record; raw SQL cannot count a record twice."""

from __future__ import annotations

import uuid
from decimal import Decimal

import asyncpg
import pytest

from work_ledger.domain.model import Actor, NewUnit, Outcome
from work_ledger.domain.shape import CostRecord
from work_ledger.domain.telemetry import TelemetryRecord
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
AGENT = Actor("agent-1")
OPUS = "claude-opus-4-8"


async def _attempt(ledger: Ledger, ref: str = "u", agent: Actor = AGENT) -> uuid.UUID:
    await ledger.register([NewUnit(ref, "f", "d")], OPERATOR)
    claim = await ledger.claim_named(ref, agent.name)
    assert claim.attempt is not None
    return claim.attempt.id


def _call(attempt: uuid.UUID, n: int, usd: str = "0.038464", model: str = OPUS) -> TelemetryRecord:
    return TelemetryRecord(attempt, f"session:s#{n}", model, Decimal(usd), 4, 12, 12288, 5120)


async def _costs(raw: asyncpg.Connection) -> list[tuple[object, ...]]:
    rows = await raw.fetch(
        "SELECT model, cost_cents, input_tokens, cache_write_tokens, estimated"
        " FROM cost_records ORDER BY id"
    )
    return [tuple(r) for r in rows]


async def test_cents_are_ceil_of_the_decimal_sum_as_deltas(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """0.038464 + 0.038464 dollars: 4 cents, then 4 more (ceil 7.6928 = 8), each call's
    tokens with them; the unit's cost is the records' sum."""
    attempt = await _attempt(ledger)
    first = await ledger.record_telemetry([_call(attempt, 2)], AGENT.name, AGENT)
    second = await ledger.record_telemetry([_call(attempt, 7)], AGENT.name, AGENT)
    assert (first.counted, first.cents, second.cents) == (1, 4, 4)
    assert await _costs(raw) == [(OPUS, 4, 4, 5120, True), (OPUS, 4, 4, 5120, True)]
    assert await raw.fetchval("SELECT cost_cents FROM work_units") == 8
    third = await ledger.record_telemetry([_call(attempt, 9, "0.0001")], AGENT.name, AGENT)
    assert third.cents == 0  # ceil(7.7028) is still 8: tokens only
    assert (await _costs(raw))[-1] == (OPUS, 0, 4, 5120, True)


async def test_a_replayed_batch_adds_nothing(ledger: Ledger, raw: asyncpg.Connection) -> None:
    attempt = await _attempt(ledger)
    batch = [_call(attempt, 2), _call(attempt, 3, "0.000457", "claude-haiku-4-5")]
    first = await ledger.record_telemetry(batch, AGENT.name, AGENT)
    again = await ledger.record_telemetry(batch + batch, AGENT.name, AGENT)
    assert (first.counted, first.cents) == (2, 5)
    assert (again.counted, again.cents, again.dropped) == (0, 0, 0)
    assert len(await _costs(raw)) == 2


async def test_unknown_and_others_attempts_are_dropped(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Another agent's attempt and an unknown id are dropped and counted; a projector's
    batch (agent None) counts any agent's attempt; a sub-agent's attempt is its agent's."""
    mine = await _attempt(ledger, "mine")
    theirs = await _attempt(ledger, "theirs", Actor("agent-2"))
    sub = await _attempt(ledger, "sub", Actor("agent-1/worker"))
    batch = [_call(mine, 1), _call(theirs, 1), _call(uuid.uuid4(), 1), _call(sub, 1)]
    outcome = await ledger.record_telemetry(batch, AGENT.name, AGENT)
    assert (outcome.dropped, outcome.counted) == (2, 2)
    collector = await ledger.record_telemetry(batch, None, Actor("collector", privileged=True))
    assert (collector.dropped, collector.counted) == (1, 1)
    costs = await raw.fetch("SELECT external_ref, cost_cents FROM work_units ORDER BY 1")
    assert [tuple(r) for r in costs] == [("mine", 4), ("sub", 4), ("theirs", 4)]


async def test_an_ended_attempt_still_takes_its_late_telemetry(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """An exporter sends seconds late: money spent is recorded on the released attempt."""
    attempt = await _attempt(ledger)
    await ledger.start("u", AGENT)
    await ledger.release("u", AGENT, outcome=Outcome.FAILED, reason="killed")
    outcome = await ledger.record_telemetry([_call(attempt, 1)], AGENT.name, AGENT)
    assert (outcome.counted, outcome.cents) == (1, 4)
    assert await raw.fetchval("SELECT cost_cents FROM work_unit_attempts") == 4


@pytest.mark.parametrize("telemetry_first", [True, False])
async def test_the_result_counts_only_above_telemetry(
    ledger: Ledger, raw: asyncpg.Connection, telemetry_first: bool
) -> None:
    """The result (8 cents, `claude-opus-4-8[1m]`) and telemetry (2 calls, 8 cents) are the
    same spend: 8 cents in all, whichever arrives first; a result above telemetry adds the
    difference."""
    attempt = await _attempt(ledger)
    result = CostRecord(
        8, f"{OPUS}[1m]", 8, 24, 24576, 10240, estimated=True, includes_telemetry=True
    )
    calls = [_call(attempt, 2), _call(attempt, 7)]
    if telemetry_first:
        await ledger.record_telemetry(calls, AGENT.name, AGENT)
        await ledger.record_cost(attempt, result, AGENT)
    else:
        await ledger.record_cost(attempt, result, AGENT)
        await ledger.record_telemetry(calls, AGENT.name, AGENT)
    assert await raw.fetchval("SELECT cost_cents FROM work_units") == 8
    sums = await raw.fetchrow(
        "SELECT sum(input_tokens) AS i, sum(cache_write_tokens) AS w, count(DISTINCT model) AS m"
        " FROM cost_records"
    )
    assert tuple(sums) == (8, 10240, 1)
    bigger = CostRecord(11, OPUS, 8, 30, estimated=True, includes_telemetry=True)
    unit, _ = await ledger.record_cost(attempt, bigger, AGENT)
    assert unit.cost_cents == 11
    assert (await _costs(raw))[-1][:2] == (OPUS, 3)


async def test_raw_sql_cannot_count_a_record_twice_or_shrink_spend(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    attempt = await _attempt(ledger)
    await ledger.record_telemetry([_call(attempt, 1)], AGENT.name, AGENT)
    with pytest.raises(asyncpg.UniqueViolationError) as twice:
        await raw.execute(
            "INSERT INTO telemetry_records (attempt_id, record_key, model, cost_usd,"
            " input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)"
            " SELECT attempt_id, record_key, model, 1, 0, 0, 0, 0 FROM telemetry_records"
        )
    assert twice.value.constraint_name == "telemetry_record_once"
    for statement in ("UPDATE telemetry_records SET cost_usd = 0", "DELETE FROM telemetry_records"):
        with pytest.raises(asyncpg.CheckViolationError) as rewritten:
            await raw.execute(statement)
        assert rewritten.value.constraint_name == "telemetry_records_append_only"
    with pytest.raises(asyncpg.CheckViolationError) as shrunk:
        await raw.execute("UPDATE attempt_model_spend SET telemetry_usd = 0")
    assert shrunk.value.constraint_name == "attempt_model_spend_delta_not_negative"
    # The recorded figures follow the sources whatever a writer sets them to.
    await raw.execute("UPDATE attempt_model_spend SET recorded_cents = 0")
    assert await raw.fetchval("SELECT recorded_cents FROM attempt_model_spend") == 4
