"""A paused scope's ready units are out of pull-next's queue (migration 0032).

`in_paused_scope` is kept by the database from `controls`: a pause marks its scope's ready
units, lifting it clears them, a unit entering ready in a paused scope is marked and one
leaving ready is not. A mark never outlives its pause (a marked unit of an open scope
would never be pulled): tried by hand with raw SQL, and under real races between a lift
and units being made ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from support.racing import racing_ledgers
from work_ledger.db.queries import QUERIES
from work_ledger.domain.flow import ControlChange
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
MARKED = "SELECT external_ref FROM work_units WHERE in_paused_scope ORDER BY external_ref"


async def _marked(raw: asyncpg.Connection) -> list[str]:
    return [r["external_ref"] for r in await raw.fetch(MARKED)]


async def _pause(ledger: Ledger, fleet: str, domain: str | None, paused: bool) -> None:
    await ledger.set_controls(ControlChange(fleet, "test", domain=domain, paused=paused), OPERATOR)


async def test_the_mark_follows_pauses_of_a_fleet_and_of_its_domains(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register(
        [NewUnit("a-1", "a", "d1"), NewUnit("a-2", "a", "d2"), NewUnit("b-1", "b", "d1")],
        OPERATOR,
    )
    await _pause(ledger, "a", None, True)
    assert await _marked(raw) == ["a-1", "a-2"]
    # Registered into a paused scope: marked at once.
    await ledger.register([NewUnit("a-3", "a", "d2")], OPERATOR)
    assert await _marked(raw) == ["a-1", "a-2", "a-3"]
    # The fleet's pause lifted while its domain d2 is paused: only d2's stay marked.
    await _pause(ledger, "a", "d2", True)
    await _pause(ledger, "a", None, False)
    assert await _marked(raw) == ["a-2", "a-3"]
    await _pause(ledger, "a", "d2", False)
    assert await _marked(raw) == []
    assert await ledger.audit() == []
    # Each unit is pulled again, oldest first.
    claimed = [await ledger.claim(f"agent-{i}") for i in range(4)]
    assert [c.unit.external_ref for c in claimed if c.unit] == ["a-1", "a-2", "b-1", "a-3"]


async def test_a_unit_entering_or_leaving_ready_takes_or_loses_its_mark(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    await ledger.register([NewUnit(f"u-{i}", "f") for i in range(3)], OPERATOR)
    held = await ledger.claim("agent-1")
    assert held.unit is not None
    assert held.unit.external_ref == "u-0"
    await _pause(ledger, "f", None, True)
    assert await _marked(raw) == ["u-1", "u-2"]
    # Released during the pause: back to ready, and marked.
    await ledger.release("u-0", Actor("agent-1"))
    assert await _marked(raw) == ["u-0", "u-1", "u-2"]
    # Disposed, or moved to an open fleet: no longer marked.
    await raw.execute("UPDATE work_units SET state = 'abandoned', disposition = 'DEFERRED',"
                      " disposed_at = now() WHERE external_ref = 'u-1'")  # fmt: skip
    await raw.execute("UPDATE work_units SET fleet = 'open' WHERE external_ref = 'u-2'")
    assert await _marked(raw) == ["u-0"]
    # A paused control row removed by hand takes its pause, and the mark, with it.
    await raw.execute("DELETE FROM controls WHERE fleet = 'f'")
    assert await _marked(raw) == []


async def test_a_mark_written_by_hand_is_refused(ledger: Ledger, raw: asyncpg.Connection) -> None:
    await ledger.register([NewUnit("open-1", "open"), NewUnit("held-1", "held")], OPERATOR)
    await _pause(ledger, "held", None, True)
    for sql in (
        "UPDATE work_units SET in_paused_scope = true WHERE external_ref = 'open-1'",
        "UPDATE work_units SET in_paused_scope = false WHERE external_ref = 'held-1'",
        "INSERT INTO work_units (external_ref, fleet, in_paused_scope) VALUES ('x', 'open', true)",
    ):
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await raw.execute(sql)
        assert refused.value.constraint_name == "unit_paused_mark_kept", sql
    assert await _marked(raw) == ["held-1"]
    # A pause is lifted in READ COMMITTED only: a REPEATABLE READ snapshot could miss a
    # unit made ready while the lift waited for it.
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        async with raw.transaction(isolation="repeatable_read"):
            await raw.execute("UPDATE controls SET paused = false, paused_since = NULL,"
                              " pause_reason = NULL WHERE fleet = 'held'")  # fmt: skip
    assert refused.value.constraint_name == "unit_paused_mark_kept"
    assert await _marked(raw) == ["held-1"]


async def test_pull_next_locks_no_unit_of_a_paused_scope_ahead(
    ledger: Ledger, raw: asyncpg.Connection, database_url: str
) -> None:
    """Before 0032 a claim locked the oldest paused unit (its head) before finding its
    scope closed: another session could not lock that unit until the claim committed."""
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, created_at)"
        " SELECT 'paused-' || g, 'weekend', now() - interval '1 day' + g * interval '1 ms'"
        " FROM generate_series(1, 200) AS g"
    )
    await ledger.register([NewUnit("open-1", "open")], OPERATOR)
    await _pause(ledger, "weekend", None, True)
    claimer = await asyncpg.connect(database_url)
    try:
        async with claimer.transaction():
            row = await claimer.fetchrow(QUERIES["claim_next_unit"], "agent-1", None, 60)
            assert row is not None
            assert row["unit"]["external_ref"] == "open-1"
            locked = await raw.fetch(
                "SELECT external_ref FROM work_units WHERE fleet = 'weekend'"
                " ORDER BY created_at FOR NO KEY UPDATE SKIP LOCKED"
            )
            assert len(locked) == 200
    finally:
        await claimer.close()


ROUNDS = 30
WRITERS = 16


@pytest.fixture
async def ledgers(database_url: str) -> AsyncIterator[list[Ledger]]:
    async with racing_ledgers(database_url, WRITERS + 1) as ledgers:
        yield ledgers


async def test_no_mark_outlives_a_pause_lifted_while_units_become_ready(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Each round: a paused fleet whose agents release their units and register more while
    the operator lifts the pause, on connections of their own. Once all commit, no unit of
    the fleet is marked, and each is pulled again. Then the same with the pause begun: no
    write waits forever, and every mark left agrees with the pause."""
    operator, writers = ledgers[0], ledgers[1:]
    for round_no in range(ROUNDS):
        fleet = f"f-{round_no:02d}"
        await operator.register(
            [NewUnit(f"{fleet}-{i:02d}", fleet) for i in range(WRITERS)], OPERATOR
        )
        held = []
        for i, lg in enumerate(writers):
            claim = await lg.claim(f"{fleet}-agent-{i:02d}")
            assert claim.unit is not None
            held.append(claim.unit.external_ref)
        await _pause(operator, fleet, None, True)

        async def write(i: int, lg: Ledger, fleet: str = fleet, held: list[str] = held) -> None:
            await asyncio.sleep(0.001 * (i % 4))
            if i % 2:
                await lg.release(held[i], Actor(f"{fleet}-agent-{i:02d}"))
            else:
                await lg.register([NewUnit(f"{fleet}-new-{i:02d}", fleet)], OPERATOR)

        await asyncio.wait_for(
            asyncio.gather(
                _pause(operator, fleet, None, False),
                *(write(i, lg) for i, lg in enumerate(writers)),
            ),
            60,
        )
        assert await _marked(raw) == [], f"round {round_no}: marks outlived the pause"
    # The pause begun while units become ready: no mark on a unit the pause does not hold.
    fleet = "last"
    await operator.register([NewUnit(f"{fleet}-{i:02d}", fleet) for i in range(WRITERS)], OPERATOR)
    await asyncio.wait_for(
        asyncio.gather(
            _pause(operator, fleet, None, True),
            *(
                lg.register([NewUnit(f"{fleet}-new-{i:02d}", fleet)], OPERATOR)
                for i, lg in enumerate(writers)
            ),
        ),
        60,
    )
    assert (
        await raw.fetchval(
            "SELECT count(*) FROM work_units WHERE fleet = $1 AND state = 'ready'"
            " AND NOT in_paused_scope",
            fleet,
        )
        <= WRITERS
    )  # registered before the pause committed: unmarked, refused by admission
    await _pause(operator, fleet, None, False)
    assert await _marked(raw) == []
    assert await operator.audit() == []


async def test_audit_reports_a_mark_no_pause_holds(ledger: Ledger, raw: asyncpg.Connection) -> None:
    await ledger.register([NewUnit("open-1", "open"), NewUnit("held-1", "held")], OPERATOR)
    await _pause(ledger, "held", None, True)
    assert await ledger.audit() == []
    # Past the triggers (replica mode fires none), as a restore of doctored rows could.
    async with raw.transaction():
        await raw.execute("SET LOCAL session_replication_role = replica")
        await raw.execute(
            "UPDATE work_units SET in_paused_scope = true WHERE external_ref = 'open-1'"
        )
    assert [(v.external_ref, v.rule) for v in await ledger.audit()] == [
        ("open-1", "unit_paused_mark_kept")
    ]
