"""A keyed write's round trips to PostgreSQL, counted: the budget of docs/request-path.md.

Every message a connection sends is logged by asyncpg's documented query logger
(`Connection.add_query_logger`), one entry per round trip (several commands sent together
are one entry). The pool here has one connection, so every round trip is seen."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Claim, NewUnit
from work_ledger.errors import ExternalRefTaken, InvariantViolation, WorkLedgerError
from work_ledger.service.idempotency import Outcome
from work_ledger.service.keyed import Key, KeyedWrites, Keying, Look
from work_ledger.service.ledger import Ledger
from work_ledger.service.shape import NewChild

# Round trips of a keyed write whose write is one statement: BEGIN with the reservation,
# the statement, the outcome with COMMIT (docs/request-path.md).
BUDGET = 3
AGENT = Actor("agent-1")


class RoundTrips:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def log(self, query: asyncpg.connection.LoggedQuery) -> None:
        self.sent.append(query.query)

    def take(self) -> list[str]:
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
async def counted(database_url: str) -> AsyncIterator[tuple[KeyedWrites, RoundTrips]]:
    trips = RoundTrips()

    async def init(conn: asyncpg.Connection) -> None:
        for type_name in ("json", "jsonb"):
            await conn.set_type_codec(
                type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
            )
        conn.add_query_logger(trips.log)

    async def keep_session(conn: asyncpg.Connection) -> None:
        """The server's pool reset (db/connect.py): no statement on giving a connection back."""

    pool = await asyncpg.create_pool(
        database_url, min_size=1, max_size=1, init=init, reset=keep_session
    )
    ledger = Ledger(Store(pool), lease_seconds=60)
    await ledger.register([NewUnit(f"u-{n}", "fleet") for n in range(3)], Actor("op", True))
    # asyncpg learns the row types once per connection (a few statements of its own).
    warm = await ledger.claim("warm-up")
    assert warm.unit is not None
    await ledger.start(str(warm.unit.id), Actor("warm-up"))
    trips.take()
    yield KeyedWrites(ledger, _refusal), trips
    await pool.close()


def _refusal(exc: WorkLedgerError) -> Outcome:
    return Outcome(exc.status, "application/problem+json", json.dumps(exc.detail).encode())


def _answer(result: Any) -> Outcome:
    return Outcome(200, "application/json", repr(result).encode())


def _key(name: str) -> Key:
    return Key("agent:agent-1", name, name.encode().ljust(32, b"."))


async def test_a_keyed_claim_and_start_each_take_three_round_trips(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    writes, trips = counted
    claimed = await writes.run(
        _key("claim"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer
    )
    assert claimed.outcome.status == 200
    sent = trips.take()
    assert len(sent) == BUDGET, sent
    assert "\nBEGIN;\n" in sent[0], sent
    assert sent[-1].endswith("\nCOMMIT"), sent
    assert not any("SAVEPOINT" in query for query in sent), sent

    [unit_id] = await _held(writes)
    trips.take()
    started = await writes.run(
        _key("start"), Keying.ATOMIC, lambda svc: svc.start(str(unit_id), AGENT), _answer
    )
    assert started.outcome.status == 200
    assert len(trips.take()) == BUDGET


async def test_a_replay_takes_three_round_trips_and_runs_nothing(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    writes, trips = counted
    first = await writes.run(
        _key("again"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer
    )
    trips.take()
    again = await writes.run(
        _key("again"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer
    )
    assert again.replayed
    assert again.outcome == first.outcome
    # BEGIN with the reservation (it finds the key), the stored outcome, ROLLBACK.
    sent = trips.take()
    assert len(sent) == 3, sent
    assert sent[-1] == "ROLLBACK"


async def test_a_refusal_rolls_back_and_is_stored_on_its_own(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    """No savepoint: the refused write rolls back, then its refusal is stored by itself,
    and a retry under the same key replays it."""
    writes, trips = counted
    await writes.run(_key("claim"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer)
    [unit_id] = await _held(writes)
    await writes.run(
        _key("start"), Keying.ATOMIC, lambda svc: svc.start(str(unit_id), AGENT), _answer
    )
    trips.take()

    async def start_again(svc: Ledger) -> Any:
        return await svc.start(str(unit_id), AGENT)  # in progress already: refused

    with pytest.raises(InvariantViolation) as refused:
        await writes.run(_key("refused"), Keying.ATOMIC, start_again, _answer)
    sent = trips.take()
    # BEGIN with the reservation, start_unit (no row), the ledger's look that names the
    # rule, ROLLBACK, the refusal stored on its own.
    assert not any("SAVEPOINT" in query for query in sent), sent
    assert "ROLLBACK" in sent, sent
    assert len(sent) <= 5, sent
    again = await writes.run(_key("refused"), Keying.ATOMIC, start_again, _answer)
    assert again.replayed
    assert again.outcome == _refusal(refused.value)


async def test_a_long_poll_look_that_claims_takes_three_round_trips(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    writes, trips = counted

    async def wait(look: Look) -> Claim:
        return await look(AGENT.name)

    answered = await writes.looks(_key("poll"), wait, _answer)
    assert answered.outcome.status == 200
    assert not answered.replayed
    assert len(trips.take()) == BUDGET


async def _held(writes: KeyedWrites) -> list[uuid.UUID]:
    rows = await writes.ledger.store.pool.fetch(
        "SELECT id FROM work_units WHERE claimed_by = $1", AGENT.name
    )
    return [row["id"] for row in rows]


async def test_a_refusal_caught_midway_runs_the_write_again_with_savepoints(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    """A split whose child ref is taken: the ledger catches the database's refusal and reads
    which refs are taken. Without a savepoint that read would fail, so the write runs again
    with savepoints, and the refusal naming the refs is stored with the key."""
    writes, trips = counted
    await writes.run(_key("claim"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer)
    [unit_id] = await _held(writes)
    await writes.run(
        _key("start"), Keying.ATOMIC, lambda svc: svc.start(str(unit_id), AGENT), _answer
    )
    trips.take()

    async def split(svc: Ledger) -> Any:
        children = [NewChild("child-1"), NewChild("u-2")]  # u-2 is registered already
        return await svc.split(str(unit_id), children, AGENT)

    with pytest.raises(ExternalRefTaken) as refused:
        await writes.run(_key("split"), Keying.ATOMIC, split, _answer)
    assert refused.value.extra == {"external_refs": ["u-2"]}
    sent = trips.take()
    assert "ROLLBACK" in sent, sent  # the first try, without savepoints
    assert any("SAVEPOINT" in query for query in sent), sent  # the second, with them
    again = await writes.run(_key("split"), Keying.ATOMIC, split, _answer)
    assert again.replayed
    assert again.outcome == _refusal(refused.value)


async def test_a_keyed_registration_and_heartbeat_take_three_round_trips(
    counted: tuple[KeyedWrites, RoundTrips],
) -> None:
    writes, trips = counted
    operator = Actor("op", privileged=True)
    batch = [NewUnit(f"batch-{n}", "fleet") for n in range(50)]
    registered = await writes.run(
        _key("register"), Keying.ATOMIC, lambda svc: svc.register(batch, operator), _answer
    )
    assert registered.outcome.status == 200
    assert len(trips.take()) == BUDGET
    await writes.run(_key("claim"), Keying.RERUNNABLE, lambda svc: svc.claim(AGENT.name), _answer)
    [attempt_id] = await _held_attempts(writes)
    trips.take()
    beat = await writes.run(
        _key("beat"), Keying.ATOMIC, lambda svc: svc.heartbeat(attempt_id, AGENT), _answer
    )
    assert beat.outcome.status == 200
    assert len(trips.take()) == BUDGET


async def _held_attempts(writes: KeyedWrites) -> list[uuid.UUID]:
    rows = await writes.ledger.store.pool.fetch(
        "SELECT id FROM work_unit_attempts WHERE agent_id = $1 AND ended_at IS NULL", AGENT.name
    )
    return [row["id"] for row in rows]
