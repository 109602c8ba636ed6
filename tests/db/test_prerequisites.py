"""Prerequisites in the database: raw SQL cannot claim a waiting unit, make a cycle or
leave a ready unit with an unfinished prerequisite; under 64 racing agents no unit is
claimed while it waits and none is stranded waiting."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import asyncpg
import pytest

from support.racing import racing_ledgers
from work_ledger.domain.model import Actor, Disposition, NewUnit, State
from work_ledger.errors import PrerequisiteCycle, UnknownPrerequisite
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
AGENTS = 64
ROUNDS = 6
EVIDENCE = "https://ci.example/run/1"


async def _id(raw: asyncpg.Connection, ref: str) -> object:
    return await raw.fetchval("SELECT id FROM work_units WHERE external_ref = $1", ref)


async def _finish(ledger: Ledger, agent: str, domain: str | None = None) -> bool:
    """Claim, start, verify and dispose MIGRATED the next unit; False when none is claimable."""
    claim = await ledger.claim(agent, domain=domain)
    if claim.unit is None:
        return False
    actor = Actor(agent)
    await ledger.start(claim.unit.external_ref, actor)
    await ledger.verify(claim.unit.external_ref, actor, EVIDENCE)
    await ledger.dispose(claim.unit.external_ref, Disposition.MIGRATED, actor)
    return True


async def test_raw_sql_cannot_claim_a_waiting_unit(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A raw UPDATE of a waiting unit to claimed (or ready) is refused by the database."""
    await ledger.register([NewUnit("lib", "f"), NewUnit("svc", "f", requires=("lib",))], OPERATOR)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "UPDATE work_units SET state = 'claimed', claimed_by = 'x', attempt_count = 1,"
            " lease_expires_at = now() + interval '1 minute' WHERE external_ref = 'svc'"
        )
    assert refused.value.constraint_name == "unit_state_transition_allowed"
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute("UPDATE work_units SET state = 'ready' WHERE external_ref = 'svc'")
    assert refused.value.constraint_name == "unit_ready_only_when_prerequisites_finished"
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "UPDATE work_units SET state = 'ready', unfinished_prerequisites = 0"
            " WHERE external_ref = 'svc'"
        )
    assert refused.value.constraint_name == "unit_prerequisites_counted"
    assert (await ledger.claim("agent-1")).unit.external_ref == "lib"  # type: ignore[union-attr]


async def test_raw_sql_cannot_make_a_cycle(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """An edge closing a cycle (through others, or on itself) is refused, whoever adds it."""
    await ledger.register(
        [NewUnit("a", "f"), NewUnit("b", "f", requires=("a",)), NewUnit("c", "f", requires=("b",))],
        OPERATOR,
    )
    a, c = await _id(raw, "a"), await _id(raw, "c")
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "INSERT INTO unit_requirements (unit_id, prerequisite_id) VALUES ($1, $2)", a, c
        )
    assert refused.value.constraint_name == "prerequisite_cycle"
    assert "a -> c -> b -> a" in str(refused.value) or "c -> b -> a" in str(refused.value)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "INSERT INTO unit_requirements (unit_id, prerequisite_id) VALUES ($1, $1)", a
        )
    assert refused.value.constraint_name == "prerequisite_cycle"


async def test_raw_sql_cannot_leave_a_ready_unit_with_an_unfinished_prerequisite(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A requirement added under a ready unit, or a counter lowered by hand, fails at commit."""
    await ledger.register([NewUnit("lib", "f"), NewUnit("svc", "f")], OPERATOR)
    lib, svc = await _id(raw, "lib"), await _id(raw, "svc")
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute(
            "INSERT INTO unit_requirements (unit_id, prerequisite_id) VALUES ($1, $2)", svc, lib
        )
    assert refused.value.constraint_name == "unit_prerequisites_counted"
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await raw.execute("TRUNCATE unit_requirements")
    assert refused.value.constraint_name == "requirements_never_deleted"


async def test_register_refuses_unknown_refs_and_cycles_writing_nothing(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Nothing of a batch with an unknown prerequisite or a cycle is written."""
    with pytest.raises(UnknownPrerequisite):
        await ledger.register([NewUnit("a", "f"), NewUnit("b", "f", requires=("zz",))], OPERATOR)
    with pytest.raises(PrerequisiteCycle):
        await ledger.register(
            [NewUnit("a", "f", requires=("b",)), NewUnit("b", "f", requires=("a",))], OPERATOR
        )
    assert await raw.fetchval("SELECT count(*) FROM work_units") == 0
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events") == 0


async def test_dropped_prerequisite_finishes_deferred_does_not(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """DROPPED frees a dependent; DEFERRED holds it, listed in v_waiting."""
    await ledger.register(
        [
            NewUnit("old", "f"),
            NewUnit("later", "f"),
            NewUnit("svc", "f", requires=("old", "later")),
        ],
        OPERATOR,
    )
    await ledger.dispose("old", Disposition.DROPPED, OPERATOR)
    await ledger.dispose("later", Disposition.DEFERRED, OPERATOR)
    rows = await raw.fetch(
        "SELECT external_ref, prerequisite_ref, prerequisite_disposition FROM v_waiting"
    )
    assert [tuple(r) for r in rows] == [("svc", "later", "DEFERRED")]
    assert (await ledger.get_unit("svc")).unit.state is State.WAITING


@pytest.fixture
async def ledgers(database_url: str) -> AsyncIterator[list[Ledger]]:
    """AGENTS ledgers, each over one connection of its own, so the claims truly race."""
    async with racing_ledgers(database_url, AGENTS) as ledgers:
        yield ledgers


async def test_64_agents_pull_while_prerequisites_finish(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Finishers close libraries while 48 agents pull their dependents: no claim of a
    waiting unit, no dependent stranded, every dependent claimed once its libraries are."""
    rng = random.Random(12)
    for round_no in range(ROUNDS):
        libs = [f"r{round_no}/lib{i}" for i in range(12)]
        units = [NewUnit(ref, "f", "libs") for ref in libs]
        services = []
        for i in range(40):
            ref = f"r{round_no}/svc{i}"
            earlier = services[-3:] if i % 4 == 0 else []
            units.append(NewUnit(ref, "f", "svc", requires=(*rng.sample(libs, 3), *earlier[:1])))
            services.append(ref)
        await ledgers[0].register(units, OPERATOR)

        await asyncio.gather(
            *(_finisher(ledgers[n], f"fin-{round_no}-{n}") for n in range(16)),
            *(_puller(ledgers[n], f"pull-{round_no}-{n}") for n in range(16, AGENTS)),
        )
        stranded = await raw.fetchval(
            "SELECT count(*) FROM work_units AS u WHERE u.state = 'waiting' AND NOT EXISTS ("
            " SELECT 1 FROM unit_requirements AS e JOIN work_units AS p ON p.id = e.prerequisite_id"
            " WHERE e.unit_id = u.id AND NOT wl_is_finished(p.state, p.disposition))"
        )
        assert stranded == 0
    early = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events AS c"
        " JOIN unit_requirements AS e ON e.unit_id = c.unit_id"
        " WHERE c.event_type = 'claimed' AND NOT EXISTS ("
        "  SELECT 1 FROM work_unit_events AS d WHERE d.unit_id = e.prerequisite_id"
        "  AND d.event_type = 'disposed' AND d.id < c.id)"
    )
    assert early == 0
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE state <> 'done'") == 0
    assert await ledgers[0].audit() == []


async def _finisher(ledger: Ledger, agent: str) -> None:
    while await _finish(ledger, agent, "libs"):
        pass


async def _puller(ledger: Ledger, agent: str) -> None:
    async with asyncio.timeout(120):
        while await raw_count_open(ledger) > 0:
            if not await _finish(ledger, agent, "svc"):
                await asyncio.sleep(0.005)


async def raw_count_open(ledger: Ledger) -> int:
    """How many dependents are not yet done (over the ledger's own connection)."""
    row = await ledger.store.pool.fetchrow(
        "SELECT count(*) AS n FROM work_units WHERE domain = 'svc' AND state <> 'done'"
    )
    assert row is not None
    count: int = row["n"]
    return count


async def test_two_transactions_cannot_close_a_cycle_together(
    ledger: Ledger, raw: asyncpg.Connection, database_url: str
) -> None:
    """Each of two open transactions adds half of a cycle: the second is refused once the
    first commits (the check takes turns and reads what committed before it)."""
    await ledger.register([NewUnit("a", "f"), NewUnit("b", "f")], OPERATOR)
    for ref in ("a", "b"):
        await ledger.dispose(ref, Disposition.DROPPED, OPERATOR)
    a, b = await _id(raw, "a"), await _id(raw, "b")
    other = await asyncpg.connect(database_url)
    try:
        first = raw.transaction()
        await first.start()
        await raw.execute(
            "INSERT INTO unit_requirements (unit_id, prerequisite_id) VALUES ($1, $2)", a, b
        )
        second = asyncio.create_task(
            other.execute(
                "INSERT INTO unit_requirements (unit_id, prerequisite_id) VALUES ($1, $2)", b, a
            )
        )
        await asyncio.sleep(0.3)
        assert not second.done()  # it waits for the first transaction's turn
        await first.commit()
        with pytest.raises(asyncpg.CheckViolationError) as refused:
            await second
        assert refused.value.constraint_name == "prerequisite_cycle"
    finally:
        await other.close()
