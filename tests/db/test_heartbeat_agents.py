"""`heartbeat_agents`: one statement renews the live leases of the agents a replica sees alive."""

from __future__ import annotations

import asyncpg

from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def test_heartbeat_agents_renews_only_the_named_agents_live_leases(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Named holders' leases move forward with a heartbeat event; others' and blocked stay."""
    refs = ["alive-1", "alive-2", "other", "paused"]
    await ledger.register([NewUnit(ref, "f") for ref in refs], OPERATOR)
    for agent in ("a/1", "a/2", "b", "c"):
        await ledger.claim(agent)
    await ledger.start("alive-2", Actor("a/2"))
    await ledger.start("paused", Actor("c"))
    await ledger.block("paused", Actor("c"), "why?")
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() + interval '5 seconds'"
        " WHERE state IN ('claimed', 'in_progress')"
    )
    before = dict(await raw.fetch("SELECT external_ref, lease_expires_at FROM work_units"))

    renewed = await ledger.heartbeat_agents(["a/1", "a/2", "c", "nobody"])

    assert sorted(renewed) == ["a/1", "a/2"]
    after = dict(await raw.fetch("SELECT external_ref, lease_expires_at FROM work_units"))
    assert after["alive-1"] > before["alive-1"]
    assert after["alive-2"] > before["alive-2"]
    assert after["other"] == before["other"]
    assert (after["paused"], before["paused"]) == (None, None)
    beats = await raw.fetch(
        "SELECT u.external_ref, e.agent_id, a.attempt_no, a.outcome IS NULL AS live"
        " FROM work_unit_events AS e JOIN work_units AS u ON u.id = e.unit_id"
        " JOIN work_unit_attempts AS a ON a.id = e.attempt_id"
        " WHERE e.event_type = 'heartbeat' ORDER BY u.external_ref"
    )
    assert [tuple(b) for b in beats] == [("alive-1", "a/1", 1, True), ("alive-2", "a/2", 1, True)]


async def test_heartbeat_agents_of_nobody_touches_nothing(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """No agent alive: no lease moves, no event."""
    await ledger.register([NewUnit("held", "f")], OPERATOR)
    await ledger.claim("a")
    before = await raw.fetchval("SELECT lease_expires_at FROM work_units")

    assert await ledger.heartbeat_agents([]) == []

    assert await raw.fetchval("SELECT lease_expires_at FROM work_units") == before
    beats = "SELECT count(*) FROM work_unit_events WHERE event_type = 'heartbeat'"
    assert await raw.fetchval(beats) == 0
