"""The keyed transaction (service/keyed.py) without HTTP: a write runs once per key, its
reservation, effect and outcome commit together or not at all, a duplicate waits for the
first and replays it, and a long-poll claim holds no reservation while it waits."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from work_ledger.domain.model import Actor, Claim, NewUnit, Registered
from work_ledger.errors import IdempotencyKeyReused, InvalidInput, InvariantViolation
from work_ledger.service.idempotency import Outcome
from work_ledger.service.keyed import Key, KeyedWrites, Keying, Look
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
SCOPE = "operator:op"


def _key(name: str = "key-1", request: bytes = b"request-1") -> Key:
    return Key(SCOPE, name, request.ljust(32, b"."))


def _refusal(exc: InvariantViolation | Exception) -> Outcome:
    return Outcome(409, "application/problem+json", str(exc).encode())


def _answer(registered: list[Registered]) -> Outcome:
    return Outcome(200, "application/json", ",".join(r.external_ref for r in registered).encode())


class Register:
    """A write that registers `ref` and counts its runs; `hold` keeps it inside its
    transaction until set, and `then` raises after the unit is written."""

    def __init__(self, ref: str, *, then: Exception | None = None) -> None:
        self.ref, self.then, self.runs = ref, then, 0
        self.written, self.hold = asyncio.Event(), asyncio.Event()
        self.hold.set()

    async def __call__(self, ledger: Ledger) -> list[Registered]:
        self.runs += 1
        registered = await ledger.register([NewUnit(self.ref, "fleet-k")], OPERATOR)
        self.written.set()
        await self.hold.wait()
        if self.then is not None:
            raise self.then
        return registered


async def _units(raw: asyncpg.Connection, ref: str) -> int:
    count: int = await raw.fetchval("SELECT count(*) FROM work_units WHERE external_ref = $1", ref)
    return count


async def _key_row(raw: asyncpg.Connection, key: str) -> asyncpg.Record | None:
    return await raw.fetchrow(
        "SELECT status_code, body FROM wl_idempotency_keys WHERE scope = $1 AND key = $2",
        SCOPE,
        key,
    )


async def _waiting_on_a_lock(raw: asyncpg.Connection) -> None:
    """Until a session of this test's database waits on a row lock (the duplicate)."""
    async with asyncio.timeout(30):
        while not await raw.fetchval(  # noqa: ASYNC110  (a database state, no event to wait on)
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ):
            await asyncio.sleep(0.01)


async def test_keyed_atomic_write_runs_once_and_replays_its_outcome(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """The second run under the key runs nothing and answers the first outcome, byte for
    byte, marked replayed."""
    writes, write = KeyedWrites(ledger, _refusal), Register("k-once")
    first = await writes.run(_key(), Keying.ATOMIC, write, _answer)
    again = await writes.run(_key(), Keying.ATOMIC, write, _answer)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.outcome == first.outcome == Outcome(200, "application/json", b"k-once")
    assert (write.runs, await _units(raw, "k-once")) == (1, 1)


async def test_keyed_refusal_by_a_rule_is_stored_raised_and_replayed(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A 409 is the ledger's decision: stored with the key and raised; a retry replays it."""
    writes = KeyedWrites(ledger, _refusal)
    refused = Register("k-refused", then=InvariantViolation("no", invariant="some_rule"))
    with pytest.raises(InvariantViolation):
        await writes.run(_key(), Keying.ATOMIC, refused, _answer)
    again = await writes.run(_key(), Keying.ATOMIC, refused, _answer)
    assert again.replayed
    assert again.outcome.status == 409
    assert refused.runs == 1
    row = await _key_row(raw, "key-1")
    assert row is not None
    assert row["status_code"] == 409


async def test_keyed_input_error_keeps_nothing_and_frees_the_key(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A 422 ran nothing: the unit written before it rolls back with the reservation, and
    the corrected retry under the same key runs."""
    writes = KeyedWrites(ledger, _refusal)
    bad = Register("k-bad", then=InvalidInput("fix it"))
    with pytest.raises(InvalidInput):
        await writes.run(_key(), Keying.ATOMIC, bad, _answer)
    assert (await _units(raw, "k-bad"), await _key_row(raw, "key-1")) == (0, None)
    retry = await writes.run(_key(), Keying.ATOMIC, Register("k-bad"), _answer)
    assert not retry.replayed
    assert await _units(raw, "k-bad") == 1


async def test_keyed_duplicate_waits_for_the_first_then_replays(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A same-key duplicate sent while the first is mid-transaction waits on its
    reservation and, once the first commits, replays it: the write ran once."""
    writes, write = KeyedWrites(ledger, _refusal), Register("k-dup")
    write.hold.clear()
    first = asyncio.create_task(writes.run(_key(), Keying.ATOMIC, write, _answer))
    await write.written.wait()
    duplicate = asyncio.create_task(writes.run(_key(), Keying.ATOMIC, write, _answer))
    await _waiting_on_a_lock(raw)
    assert not duplicate.done()
    write.hold.set()
    answers = await asyncio.gather(first, duplicate)
    assert [a.replayed for a in answers] == [False, True]
    assert (write.runs, await _units(raw, "k-dup")) == (1, 1)


async def test_keyed_duplicate_runs_as_first_when_the_first_rolls_back(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """The first dies mid-write (not a ledger error): its unit and reservation roll back,
    and the waiting duplicate runs the write itself."""
    writes = KeyedWrites(ledger, _refusal)
    dying = Register("k-dies", then=RuntimeError("the server died"))
    dying.hold.clear()
    first = asyncio.create_task(writes.run(_key(), Keying.ATOMIC, dying, _answer))
    await dying.written.wait()
    retry = Register("k-dies")
    duplicate = asyncio.create_task(writes.run(_key(), Keying.ATOMIC, retry, _answer))
    await _waiting_on_a_lock(raw)
    dying.hold.set()
    with pytest.raises(RuntimeError):
        await first
    answer = await duplicate
    assert not answer.replayed
    assert (retry.runs, await _units(raw, "k-dies")) == (1, 1)


async def test_keyed_key_reused_for_another_request_is_refused(ledger: Ledger) -> None:
    """The same key with a different request hash is a 422 naming the reuse, and runs nothing."""
    writes, write = KeyedWrites(ledger, _refusal), Register("k-reuse")
    await writes.run(_key(request=b"one"), Keying.ATOMIC, write, _answer)
    with pytest.raises(IdempotencyKeyReused):
        await writes.run(_key(request=b"two"), Keying.ATOMIC, write, _answer)
    assert write.runs == 1


async def test_keyed_apart_commits_the_reservation_before_the_write(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """APART (projection batches): another session sees the reservation, without an
    outcome, while the write runs; then the outcome."""
    writes, write = KeyedWrites(ledger, _refusal), Register("k-apart")
    write.hold.clear()
    running = asyncio.create_task(writes.run(_key(), Keying.APART, write, _answer))
    await write.written.wait()
    during = await _key_row(raw, "key-1")
    write.hold.set()
    await running
    after = await _key_row(raw, "key-1")
    assert during is not None
    assert during["status_code"] is None
    assert after is not None
    assert (after["status_code"], bytes(after["body"])) == (200, b"k-apart")


async def test_keyed_looks_hold_no_reservation_until_one_claims(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """A long-poll claim's empty look leaves no reservation behind; the look that claims
    stores the answer with the claim, and a same-key retry replays it."""
    writes = KeyedWrites(ledger, _refusal)
    seen: list[asyncpg.Record | None] = []

    async def wait(look: Look) -> Claim:
        empty = await look("agent-k")
        assert empty.unit is None
        seen.append(await _key_row(raw, "key-1"))
        await ledger.register([NewUnit("k-claimed", "fleet-k")], OPERATOR)
        return await look("agent-k")

    def answer(claim: Claim) -> Outcome:
        assert claim.unit is not None
        return Outcome(200, "application/json", claim.unit.external_ref.encode())

    first = await writes.looks(_key(), wait, answer)
    again = await writes.looks(_key(), _never_looks, answer)
    assert seen == [None]
    assert (first.replayed, again.replayed) == (False, True)
    assert again.outcome.body == b"k-claimed"
    held = await raw.fetchval("SELECT count(*) FROM work_units WHERE claimed_by = 'agent-k'")
    assert held == 1


async def _never_looks(look: Look) -> Claim:
    """A wait that would claim anew: a replayed key must answer before it runs."""
    return await look("agent-other")
