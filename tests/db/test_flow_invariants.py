"""The flow controls' rules held by the database (DESIGN §13): tried with raw SQL, which no
service check stands in front of."""

from __future__ import annotations

import asyncpg
import pytest

from work_ledger.domain.model import Actor, Claim, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def _control(
    raw: asyncpg.Connection,
    fleet: str,
    domain: str | None = None,
    *,
    max_live: int | None = None,
    paused: bool = False,
) -> None:
    await raw.execute(
        "INSERT INTO controls (fleet, domain, max_live, paused, paused_since, pause_reason,"
        " reason, updated_by)"
        " VALUES ($1, $2, $3, $4, CASE WHEN $4 THEN now() END, CASE WHEN $4 THEN 'test' END,"
        " 'test', 'operator')",
        fleet,
        domain,
        max_live,
        paused,
    )


async def _raw_claim(raw: asyncpg.Connection, ref: str) -> None:
    """Claims a unit the way no statement of the ledger would: one bare UPDATE (its
    attempt row missing would only be refused at commit; the controls refuse it first)."""
    await raw.execute(
        "UPDATE work_units SET state = 'claimed', claimed_by = 'intruder-' || external_ref,"
        " attempt_count = attempt_count + 1, last_heartbeat_at = now(),"
        " lease_expires_at = now() + interval '1 minute' WHERE external_ref = $1",
        ref,
    )


async def test_second_holder_of_a_key_is_refused_by_a_raw_update(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A unit sharing a key with a held unit cannot become held, whatever writes it."""
    await ledger.register(
        [NewUnit("k-1", "f", exclusive=("mod/a",)), NewUnit("k-2", "f", exclusive=("mod/a",))],
        OPERATOR,
    )
    claim = await ledger.claim("agent-1")
    assert claim.unit is not None
    assert claim.unit.external_ref == "k-1"
    with pytest.raises(asyncpg.UniqueViolationError) as refused:
        await _raw_claim(raw, "k-2")
    assert refused.value.constraint_name == "exclusive_key_held"
    assert await raw.fetchval("SELECT state FROM work_units WHERE external_ref = 'k-2'") == "ready"
    with pytest.raises(asyncpg.UniqueViolationError):
        await raw.execute(
            "INSERT INTO held_keys (key, unit_id)"
            " SELECT 'mod/a', id FROM work_units WHERE external_ref = 'k-2'"
        )
    with pytest.raises(asyncpg.CheckViolationError) as emptied:
        await raw.execute("TRUNCATE held_keys")
    assert emptied.value.constraint_name == "held_keys_kept_by_trigger"
    assert await raw.fetchval("SELECT count(*) FROM held_keys") == 1


async def test_keys_are_given_back_when_the_unit_stops_being_held(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Released, the first unit's keys go; the second unit then takes the shared one."""
    await ledger.register(
        [NewUnit("g-1", "f", exclusive=("t", "s")), NewUnit("g-2", "f", exclusive=("s",))],
        OPERATOR,
    )
    first = await ledger.claim("agent-1")
    assert first.unit is not None
    assert first.attempt is not None
    assert await raw.fetchval("SELECT array_agg(key ORDER BY key) FROM held_keys") == ["s", "t"]
    assert await ledger.claim("agent-2") == Claim(None, None)
    await ledger.release(first.unit.id.hex, Actor("agent-1"), attempt_id=first.attempt.id)
    second = await ledger.claim_named("g-2", "agent-2")
    assert second.unit is not None
    assert second.unit.external_ref == "g-2"
    assert await raw.fetchval("SELECT array_agg(key) FROM held_keys") == ["s"]


async def test_control_events_cannot_be_changed_or_removed(raw: asyncpg.Connection) -> None:
    await raw.execute(
        "INSERT INTO control_events (fleet, actor, after, reason)"
        " VALUES ('f', 'operator', '{}', 'test')"
    )
    for statement in (
        "UPDATE control_events SET reason = 'rewritten'",
        "DELETE FROM control_events",
        "TRUNCATE control_events",
    ):
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await raw.execute(statement)
        assert refused.value.constraint_name == "control_events_append_only"
    assert await raw.fetchval("SELECT reason FROM control_events") == "test"


async def test_live_above_a_cap_is_refused_by_a_raw_update(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register([NewUnit(f"c-{i}", "f", "d") for i in range(3)], OPERATOR)
    await _control(raw, "f", "d", max_live=1)
    assert (await ledger.claim("agent-1")).unit is not None
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await _raw_claim(raw, "c-2")
    assert refused.value.constraint_name == "scope_cap_reached"
    live = "SELECT count(*) FROM work_units WHERE state IN ('claimed', 'in_progress')"
    assert await raw.fetchval(live) == 1


async def test_a_fleet_cap_counts_every_domain_of_the_fleet(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register(
        [NewUnit("x-1", "f", "d1"), NewUnit("x-2", "f", "d2"), NewUnit("y-1", "other")],
        OPERATOR,
    )
    await _control(raw, "f", max_live=1)
    first = await ledger.claim("agent-1")
    assert first.unit is not None
    assert first.unit.external_ref == "x-1"
    # The fleet is at its cap: pull-next goes on to units elsewhere.
    second = await ledger.claim("agent-2")
    assert second.unit is not None
    assert second.unit.external_ref == "y-1"
    assert await ledger.claim("agent-3") == Claim(None, None)
    with pytest.raises(asyncpg.CheckViolationError):
        await _raw_claim(raw, "x-2")


async def test_a_paused_scope_refuses_raw_claims_and_stale_reclaims(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register([NewUnit(f"p-{i}", "f", "d") for i in range(2)], OPERATOR)
    held = await ledger.claim("agent-1")
    assert held.unit is not None
    await _control(raw, "f", paused=True)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await _raw_claim(raw, "p-1")
    assert refused.value.constraint_name == "scope_paused"
    # A lapsed lease is not reclaimed in a paused scope, by the claim or by raw SQL.
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
        " WHERE external_ref = 'p-0'"
    )
    assert await ledger.claim("agent-2") == Claim(None, None)
    with pytest.raises(asyncpg.CheckViolationError):
        await raw.execute(
            "UPDATE work_units SET claimed_by = 'intruder' WHERE external_ref = 'p-0'"
        )
    # A domain's own paused = false does not lift its fleet's pause.
    await _control(raw, "f", "d", paused=False)
    assert await ledger.claim("agent-2") == Claim(None, None)
    # Held work goes on: the holder still heartbeats and releases.
    assert held.attempt is not None
    await ledger.heartbeat(held.attempt.id, Actor("agent-1"))


async def test_a_stale_reclaim_is_allowed_at_the_cap(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register([NewUnit(f"s-{i}", "f") for i in range(2)], OPERATOR)
    await _control(raw, "f", max_live=1)
    old = await ledger.claim("agent-old")
    assert old.unit is not None
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
        " WHERE external_ref = 's-0'"
    )
    new = await ledger.claim("agent-new")
    assert new.unit is not None
    assert new.unit.external_ref == "s-0"
    assert await ledger.claim("agent-third") == Claim(None, None)


async def test_gates_and_control_events_are_json_objects_the_check_reads(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A gate is kept as a JSON object (not a string holding one), so the gate's shape
    check applies: raw SQL writing a share above 1, a gate missing a field, or a string
    is refused."""
    from work_ledger.domain.flow import ControlChange
    from work_ledger.domain.model import Actor

    gate = {"max_failed_share": 0.2, "last_attempts": 50}
    change = ControlChange("f", "ramp", max_live=3, gate=gate)
    await ledger.set_controls(change, Actor("operator", privileged=True))
    kept = await raw.fetchrow(
        "SELECT jsonb_typeof(c.gate) AS gate, jsonb_typeof(e.after) AS after"
        " FROM controls AS c, control_events AS e"
    )
    assert (kept["gate"], kept["after"]) == ("object", "object")
    for bad in (
        '{"max_failed_share": 5, "last_attempts": 50}',
        '{"last_attempts": 50}',
        '{"max_failed_share": "0.1", "last_attempts": 50}',
        '"a string"',
    ):
        with pytest.raises(asyncpg.CheckViolationError, match="controls_gate_shape"):
            await raw.execute("UPDATE controls SET gate = $1::text::jsonb", bad)
