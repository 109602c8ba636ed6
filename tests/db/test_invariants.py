"""The invariants of DESIGN §3-§4, refused by the service and by PostgreSQL itself.

Each refusal names its rule and writes nothing: every table is photographed before and
after, and the photographs must agree.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from work_ledger.db.connect import ensure_database, with_database
from work_ledger.domain.model import NEXT_ACTIONS, TRANSITIONS, Actor, Disposition, NewUnit, State
from work_ledger.errors import InvariantViolation
from work_ledger.service.ledger import Ledger
from work_ledger.service.shape import NewChild

OPERATOR = Actor("operator", privileged=True)
Snapshot = Callable[[], Awaitable[tuple[object, ...]]]


@pytest.fixture(scope="module")
async def database_url(server_url: str, template_name: str) -> AsyncIterator[str]:
    """One database for this module: its tests are refused, or touch only their own units."""
    name = f"wl_invariants_{uuid.uuid4().hex[:12]}"
    await ensure_database(server_url, name, template=template_name)
    yield with_database(server_url, name)
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


ILLEGAL = [(f, t) for f in State for t in State if f is not t and t not in TRANSITIONS[f]]


def test_illegal_pairs_cover_every_refused_move() -> None:
    """The illegal pairs are the complement of the allowed map: 40 of them."""
    allowed = sum(len(targets - {f}) for f, targets in TRANSITIONS.items())
    assert len(ILLEGAL) == len(State) * (len(State) - 1) - allowed == 40


def _writes_to(ledger: Ledger, ref: str, to: State) -> list[Awaitable[Any]]:
    """Every service call whose success would move the unit to `to`."""
    if to is State.CLAIMED:
        return [ledger.claim_named(ref, "agent-newcomer")]
    if to is State.IN_PROGRESS:
        return [ledger.start(ref, OPERATOR), ledger.unblock(ref, "use EUR", OPERATOR)]
    if to is State.READY:
        return [ledger.release(ref, OPERATOR)]
    if to is State.BLOCKED:
        return [ledger.block(ref, OPERATOR, "which currency?")]
    if to is State.VERIFIED:
        return [ledger.verify(ref, OPERATOR, "https://ci.example/run/9")]
    if to is State.DONE:
        return [ledger.dispose(ref, Disposition.MIGRATED, OPERATOR)]
    if to is State.WAITING:
        return [ledger.split(ref, [NewChild(f"{ref}/part")], OPERATOR)]
    return [
        ledger.dispose(ref, d, OPERATOR)
        for d in (Disposition.DROPPED, Disposition.DEFERRED, Disposition.DEAD)
    ]


@pytest.mark.parametrize("from_state", list(State), ids=str)
async def test_service_refuses_illegal_transition(
    ledger: Ledger, units: Any, snapshot: Snapshot, from_state: State
) -> None:
    """Every illegal move through the service is an InvariantViolation naming the rule; no write."""
    for to_state in [t for f, t in ILLEGAL if f is from_state]:
        placed = await units.place(from_state)
        before = await snapshot()
        for write in _writes_to(ledger, placed.unit.external_ref, to_state):
            with pytest.raises(InvariantViolation) as refused:
                await write
            assert refused.value.invariant in (
                "unit_state_transition_allowed",
                "unit_claimed_only_when_claimable",
                "prerequisites_unfinished",
            ), to_state
            assert refused.value.state == from_state
            assert refused.value.allowed == list(NEXT_ACTIONS[from_state])
            assert refused.value.unit_id == str(placed.unit.id)
            assert str(from_state) in refused.value.detail
            assert await snapshot() == before, to_state


async def test_service_refuses_a_disposition_the_state_does_not_allow(
    ledger: Ledger, units: Any, snapshot: Snapshot
) -> None:
    """DEFERRED from in_progress and DROPPED from blocked are refused, naming what is allowed."""
    for state, disposition in [
        (State.IN_PROGRESS, Disposition.DEFERRED),
        (State.BLOCKED, Disposition.DROPPED),
    ]:
        placed = await units.place(state)
        before = await snapshot()
        with pytest.raises(InvariantViolation) as refused:
            await ledger.dispose(placed.unit.external_ref, disposition, OPERATOR)
        assert refused.value.invariant == "unit_state_transition_allowed"
        assert f"dispose {disposition}" in refused.value.detail
        assert refused.value.state == state
        assert await snapshot() == before


@pytest.mark.parametrize("from_state", list(State), ids=str)
async def test_raw_sql_refuses_illegal_transition(
    raw: asyncpg.Connection, units: Any, snapshot: Snapshot, from_state: State
) -> None:
    """An UPDATE of state outside the map is refused by the trigger, named, with the way out."""
    placed = await units.place(from_state)
    before = await snapshot()
    for to_state in [t for f, t in ILLEGAL if f is from_state]:
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await raw.execute(
                "UPDATE work_units SET state = $2 WHERE id = $1", placed.unit.id, to_state
            )
        assert refused.value.constraint_name == "unit_state_transition_allowed"
        assert f"from {from_state} to {to_state}" in refused.value.message
        assert refused.value.hint.startswith(f"allowed from {from_state}: ")
        assert await snapshot() == before


# (the state the unit is put in, statements run in one transaction with $1 = unit id, rule)
RAW_REFUSALS: list[tuple[State, list[str], str]] = [
    (
        State.READY,
        ["UPDATE work_unit_events SET agent_id = 'x' WHERE unit_id = $1"],
        "events_append_only",
    ),
    (State.READY, ["DELETE FROM work_unit_events WHERE unit_id = $1"], "events_append_only"),
    (State.READY, ["TRUNCATE work_unit_events"], "events_append_only"),
    (State.READY, ["DELETE FROM work_units WHERE id = $1"], "units_never_deleted"),
    (
        State.CLAIMED,
        ["DELETE FROM work_unit_attempts WHERE unit_id = $1"],
        "attempts_never_deleted",
    ),
    (
        State.BLOCKED,
        ["DELETE FROM blocking_questions WHERE unit_id = $1"],
        "questions_never_deleted",
    ),
    (
        State.READY,
        ["UPDATE work_units SET disposition = 'MIGRATED', disposed_at = now() WHERE id = $1"],
        "unit_disposition_matches_state",
    ),
    (
        State.READY,
        ["UPDATE work_units SET state = 'abandoned' WHERE id = $1"],
        "unit_disposition_matches_state",
    ),
    (
        State.VERIFIED,
        [
            "UPDATE work_units SET state = 'done', disposition = 'DEAD',"
            " disposed_at = now() WHERE id = $1"
        ],
        "unit_disposition_matches_state",
    ),
    (
        State.IN_PROGRESS,
        [
            "UPDATE work_units SET state = 'abandoned', disposition = 'DEFERRED',"
            " disposed_at = now(), claimed_by = NULL, lease_expires_at = NULL"
            " WHERE id = $1"
        ],
        "unit_disposition_allowed_from_state",
    ),
    (
        State.READY,
        ["UPDATE work_units SET disposed_at = now() WHERE id = $1"],
        "unit_disposed_at_iff_disposition",
    ),
    (
        State.DONE,
        ["UPDATE work_units SET disposed_at = now() + interval '1 day' WHERE id = $1"],
        "unit_disposition_final",
    ),
    (
        State.ABANDONED,
        ["UPDATE work_units SET disposition = 'DEAD' WHERE id = $1"],
        "unit_disposition_final",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_units SET claimed_by = NULL WHERE id = $1"],
        "unit_holder_iff_held",
    ),
    (
        State.BLOCKED,
        ["UPDATE work_units SET claimed_by = NULL WHERE id = $1"],
        "unit_holder_iff_held",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_units SET lease_expires_at = NULL WHERE id = $1"],
        "unit_lease_iff_leased",
    ),
    (
        State.BLOCKED,
        ["UPDATE work_units SET lease_expires_at = now() WHERE id = $1"],
        "unit_lease_iff_leased",
    ),
    (
        State.IN_PROGRESS,
        ["UPDATE work_units SET claimed_by = 'intruder' WHERE id = $1"],
        "unit_holder_changes_only_by_claim",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_units SET attempt_count = attempt_count + 1 WHERE id = $1"],
        "unit_claimed_only_when_claimable",
    ),
    (
        State.READY,
        ["UPDATE work_units SET attempt_count = 1 WHERE id = $1"],
        "unit_claimed_only_when_claimable",
    ),
    (
        State.READY,
        [
            "INSERT INTO work_units (external_ref, fleet, state, claimed_by,"
            " lease_expires_at) VALUES ('sneaky', 'f', 'claimed', 'a', now())"
        ],
        "unit_registered_ready",
    ),
    (
        State.READY,
        [
            "INSERT INTO work_units (external_ref, fleet)"
            " SELECT external_ref, 'f' FROM work_units WHERE id = $1"
        ],
        "unit_external_ref_unique",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_units SET cost_cents = -1 WHERE id = $1"],
        "unit_cost_not_negative",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_units SET cost_cents = cost_cents + 5 WHERE id = $1"],
        "unit_cost_equals_attempt_costs",
    ),
    (
        State.DONE,
        ["UPDATE work_unit_attempts SET cost_cents = cost_cents + 5 WHERE unit_id = $1"],
        "unit_cost_equals_attempt_costs",
    ),
    (
        State.READY,
        [
            "INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, cost_cents, outcome,"
            " ended_at) VALUES ($1, 1, 'b', -5, 'failed', now())"
        ],
        "attempt_cost_not_negative",
    ),
    (
        State.READY,
        [
            "INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, outcome,"
            " ended_at) VALUES ($1, 1, 'ghost', 'failed', now())"
        ],
        "attempt_numbers_contiguous",
    ),
    (
        State.CLAIMED,
        [
            "UPDATE work_units SET lease_expires_at = now() - interval '1 s',"
            " attempt_count = 3, claimed_by = 'b' WHERE id = $1"
        ],
        "unit_claimed_only_when_claimable",
    ),
    (
        State.READY,
        [
            "UPDATE work_units SET state = 'claimed', claimed_by = 'b', attempt_count = 1,"
            " lease_expires_at = now() + interval '1 hour' WHERE id = $1",
            "INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id) VALUES ($1, 2, 'b')",
        ],
        "attempt_numbers_contiguous",
    ),
    (
        State.CLAIMED,
        [
            "INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, outcome,"
            " ended_at) VALUES ($1, 1, 'b', 'failed', now())"
        ],
        "attempt_no_unique_per_unit",
    ),
    (
        State.READY,
        ["INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id) VALUES ($1, 0, 'b')"],
        "attempt_no_positive",
    ),
    (
        State.CLAIMED,
        ["INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id) VALUES ($1, 2, 'b')"],
        "one_live_attempt_per_unit",
    ),
    (
        State.DONE,
        ["UPDATE work_unit_attempts SET outcome = 'failed' WHERE unit_id = $1"],
        "attempt_outcome_final",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_unit_attempts SET agent_id = 'b' WHERE unit_id = $1"],
        "attempt_outcome_final",
    ),
    (
        State.IN_PROGRESS,
        [
            "UPDATE work_unit_attempts SET cost_cents = cost_cents + 10 WHERE unit_id = $1",
            "UPDATE work_units SET cost_cents = cost_cents + 10 WHERE id = $1",
            "UPDATE work_unit_attempts SET cost_cents = cost_cents - 10 WHERE unit_id = $1",
            "UPDATE work_units SET cost_cents = cost_cents - 10 WHERE id = $1",
        ],
        "attempt_outcome_final",
    ),
    (
        State.CLAIMED,
        ["UPDATE work_unit_attempts SET ended_at = now() WHERE unit_id = $1"],
        "attempt_outcome_iff_ended",
    ),
    (
        State.READY,
        ["UPDATE work_units SET evidence_urls = ARRAY['the tests passed, trust me'] WHERE id = $1"],
        "unit_evidence_is_link",
    ),
    (
        State.READY,
        ["UPDATE work_units SET evidence_urls = ARRAY['javascript:alert(1)'] WHERE id = $1"],
        "unit_evidence_is_link",
    ),
    (
        State.READY,
        [
            "UPDATE work_units SET evidence_urls = ARRAY['https://ci.example/'"
            " || repeat('a', 2048)] WHERE id = $1"
        ],
        "unit_evidence_is_link",
    ),
    (
        State.READY,
        ["UPDATE work_units SET evidence_urls = ARRAY[NULL]::text[] WHERE id = $1"],
        "unit_evidence_is_link",
    ),
    (
        State.IN_PROGRESS,
        ["UPDATE work_unit_attempts SET evidence_url = 'data:text/plain,ok' WHERE unit_id = $1"],
        "attempt_evidence_is_link",
    ),
    (
        State.READY,
        [
            "INSERT INTO work_unit_events (unit_id, event_type, cost_delta_cents)"
            " VALUES ($1, 'cost_recorded', -5)"
        ],
        "event_cost_delta_not_negative",
    ),
    (
        State.BLOCKED,
        ["INSERT INTO blocking_questions (unit_id, question) VALUES ($1, 'again?')"],
        "one_open_question_per_unit",
    ),
    (
        State.BLOCKED,
        ["UPDATE blocking_questions SET status = 'answered', closed_at = now() WHERE unit_id = $1"],
        "question_answer_iff_answered",
    ),
    (
        State.BLOCKED,
        ["UPDATE blocking_questions SET closed_at = now() WHERE unit_id = $1"],
        "question_closed_iff_not_open",
    ),
]


async def _in_one_transaction(
    raw: asyncpg.Connection, statements: list[str], unit_id: uuid.UUID
) -> None:
    async with raw.transaction():
        for statement in statements:
            await raw.execute(statement, *([unit_id] if "$1" in statement else []))


@pytest.mark.parametrize(
    ("state", "statements", "rule"),
    RAW_REFUSALS,
    ids=[f"{rule}-{i}" for i, (_, _, rule) in enumerate(RAW_REFUSALS)],
)
async def test_raw_sql_refuses_breaking_an_invariant(
    raw: asyncpg.Connection,
    units: Any,
    snapshot: Snapshot,
    state: State,
    statements: list[str],
    rule: str,
) -> None:
    """Raw SQL that would break an invariant is refused with the invariant's name; no write."""
    placed = await units.place(state)
    before = await snapshot()
    with pytest.raises(asyncpg.IntegrityConstraintViolationError) as refused:
        await _in_one_transaction(raw, statements, placed.unit.id)
    assert refused.value.constraint_name == rule
    assert await snapshot() == before


async def test_unit_cost_follows_attempt_cost_in_one_transaction(
    raw: asyncpg.Connection, units: Any
) -> None:
    """The cost sum is checked at commit: changing attempt and unit together is accepted."""
    placed = await units.place(State.IN_PROGRESS)
    async with raw.transaction():
        await raw.execute(
            "UPDATE work_unit_attempts SET cost_cents = cost_cents + 7 WHERE unit_id = $1",
            placed.unit.id,
        )
        await raw.execute(
            "UPDATE work_units SET cost_cents = cost_cents + 7 WHERE id = $1", placed.unit.id
        )
        await raw.execute(
            "INSERT INTO cost_records (attempt_id, unit_id, cost_cents)"
            " SELECT id, unit_id, 7 FROM work_unit_attempts WHERE unit_id = $1",
            placed.unit.id,
        )
    cost = await raw.fetchval("SELECT cost_cents FROM work_units WHERE id = $1", placed.unit.id)
    assert cost == 7


async def test_raw_sql_refuses_a_second_live_claim_for_one_agent(
    ledger: Ledger, raw: asyncpg.Connection, units: Any, snapshot: Snapshot
) -> None:
    """Un-blocking by hand while the holder holds another live claim breaks one claim each."""
    blocked = await units.place(State.BLOCKED)
    await ledger.register([NewUnit("other", "fleet-a")], OPERATOR)
    await ledger.claim_named("other", blocked.agent.name)
    before = await snapshot()
    with pytest.raises(asyncpg.UniqueViolationError) as refused:
        await raw.execute(
            "UPDATE work_units SET state = 'in_progress', lease_expires_at = now()"
            " + interval '1 hour' WHERE id = $1",
            blocked.unit.id,
        )
    assert refused.value.constraint_name == "one_live_claim_per_agent"
    assert await snapshot() == before


async def test_raw_sql_refuses_reopening_a_closed_question(
    ledger: Ledger, raw: asyncpg.Connection, units: Any, snapshot: Snapshot
) -> None:
    """A question closed by an answer never changes again."""
    blocked = await units.place(State.BLOCKED)
    await ledger.unblock(blocked.unit.external_ref, "use EUR", OPERATOR)
    before = await snapshot()
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "UPDATE blocking_questions SET status = 'open', answer = NULL, closed_at = NULL"
            " WHERE unit_id = $1",
            blocked.unit.id,
        )
    assert refused.value.constraint_name == "question_status_final"
    assert await snapshot() == before


async def test_raw_sql_refuses_truncating_units(raw: asyncpg.Connection, units: Any) -> None:
    """TRUNCATE of the units (even cascading) is refused: history is kept forever."""
    await units.place(State.DONE)
    count = await raw.fetchval("SELECT count(*) FROM work_units")
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "TRUNCATE work_units, work_unit_attempts, blocking_questions, work_unit_events,"
            " unit_requirements, cost_records, telemetry_records, attempt_model_spend"
        )
    assert refused.value.constraint_name in {
        "requirements_never_deleted",
        "cost_records_append_only",
        "units_never_deleted",
        "attempts_never_deleted",
        "questions_never_deleted",
        "events_append_only",
        "telemetry_records_append_only",
    }
    assert await raw.fetchval("SELECT count(*) FROM work_units") == count >= 1
