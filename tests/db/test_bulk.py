"""Bulk dispose and release (DESIGN §13): a dry run answers what the real run does, a real
run is one transaction, each unit gets its ordinary event carrying `detail.bulk`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, ClassVar

import asyncpg
import pytest
from asyncpg import Pool

from support.placing import OPERATOR, Snapshot, UnitFactory
from support.racing import racing_ledgers
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, NewUnit, Outcome, State
from work_ledger.errors import InvalidInput, InvariantViolation
from work_ledger.service.bulk import SKIP_RULE, BulkAction, BulkFilter, BulkResult
from work_ledger.service.ledger import Ledger

ORDERS = BulkFilter("fleet-a", domain="orders")


def answer(result: BulkResult) -> tuple[object, ...]:
    """What a dry run must equal: everything but the dry_run flag and the operation id."""
    return (result.matched, result.changed, result.skipped)


async def place_every_state(units: UnitFactory) -> dict[State, str]:
    placed = {}
    for state in State:
        placed[state] = (await units.place(state)).unit.external_ref
    return placed


async def test_dry_run_answers_what_the_real_run_does(
    ledger: Ledger, units: UnitFactory, snapshot: Snapshot
) -> None:
    """A bulk DEFERRED over units in every state: the dry run writes nothing and answers
    exactly what the real run then does; the states DEFERRED may not leave are skipped."""
    placed = await place_every_state(units)
    before = await snapshot()
    dry = await ledger.bulk(
        BulkAction.DISPOSE, ORDERS, OPERATOR, reason="legacy off", disposition=Disposition.DEFERRED
    )
    assert await snapshot() == before
    real = await ledger.bulk(
        BulkAction.DISPOSE,
        ORDERS,
        OPERATOR,
        reason="legacy off",
        disposition=Disposition.DEFERRED,
        dry_run=False,
    )
    assert answer(dry) == answer(real)
    assert (dry.dry_run, dry.operation, real.dry_run) == (True, None, False)
    assert real.operation is not None
    changed = {c.external_ref: (c.from_state, c.to_state) for c in real.changed}
    assert changed == {
        placed[State.READY]: (State.READY, State.ABANDONED),
        placed[State.WAITING]: (State.WAITING, State.ABANDONED),
        placed[State.BLOCKED]: (State.BLOCKED, State.ABANDONED),
    }
    # WAITING's unit is in domain orders too; its prerequisite (domain libs) is not matched.
    assert real.matched == len(State)


async def test_skipped_units_carry_the_rule(ledger: Ledger, units: UnitFactory) -> None:
    """A unit whose state does not allow the action is skipped, never an error: the rule's
    name, its state and the next allowed steps."""
    done = (await units.place(State.DONE)).unit
    result = await ledger.bulk(
        BulkAction.DISPOSE, ORDERS, OPERATOR, reason="r", disposition=Disposition.DEAD
    )
    [skipped] = result.skipped
    assert (skipped.id, skipped.state, skipped.rule) == (done.id, State.DONE, SKIP_RULE)
    assert skipped.reason.startswith(f"{SKIP_RULE}: unit {done.external_ref} is done;")
    assert "dispose DEAD needs it" in skipped.reason
    assert result.changed == []


async def test_events_carry_detail_bulk(
    ledger: Ledger, units: UnitFactory, raw: asyncpg.Connection
) -> None:
    """Each disposed unit gets its ordinary `disposed` event, with the operation and reason;
    a blocked unit's open question is cancelled and its attempt ends blocked, as alone."""
    blocked = (await units.place(State.BLOCKED)).unit
    ready = (await units.place(State.READY)).unit
    result = await ledger.bulk(
        BulkAction.DISPOSE,
        ORDERS,
        OPERATOR,
        reason="legacy off",
        disposition=Disposition.DEFERRED,
        dry_run=False,
    )
    rows = await raw.fetch(
        "SELECT unit_id, event_type, agent_id, detail::text FROM work_unit_events"
        " WHERE detail ? 'bulk' ORDER BY unit_id"
    )
    assert {r["unit_id"] for r in rows} == {blocked.id, ready.id}
    for row in rows:
        assert (row["event_type"], row["agent_id"]) == ("disposed", "operator")
        detail = json.loads(row["detail"])
        assert detail["bulk"] == {"operation": str(result.operation), "reason": "legacy off"}
        assert detail["disposition"] == "DEFERRED"
    blocked_after = await ledger.get_unit(blocked.external_ref)
    assert blocked_after.attempts[-1].outcome is Outcome.BLOCKED
    assert [q.status for q in blocked_after.questions] == ["cancelled"]


async def test_release_ends_attempts_abandoned(
    ledger: Ledger, units: UnitFactory, raw: asyncpg.Connection
) -> None:
    """A bulk release takes claimed and in_progress units back to ready, their attempts
    ended abandoned, each with its `released` event; held_by narrows it to one agent."""
    claimed = await units.place(State.CLAIMED)
    working = await units.place(State.IN_PROGRESS)
    other = await units.place(State.IN_PROGRESS)
    where = dataclasses.replace(ORDERS, held_by=claimed.agent.name)
    result = await ledger.bulk(
        BulkAction.RELEASE, where, OPERATOR, reason="bad model", dry_run=False
    )
    assert [(c.id, c.from_state, c.to_state) for c in result.changed] == [
        (claimed.unit.id, State.CLAIMED, State.READY)
    ]
    both = BulkFilter("fleet-a", states=(State.IN_PROGRESS,))
    result = await ledger.bulk(
        BulkAction.RELEASE, both, OPERATOR, reason="bad model", dry_run=False
    )
    assert {c.id for c in result.changed} == {working.unit.id, other.unit.id}
    for placed in (claimed, working, other):
        detail = await ledger.get_unit(placed.unit.external_ref)
        assert detail.unit.state is State.READY
        assert detail.attempts[-1].outcome is Outcome.ABANDONED
    events = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events WHERE event_type = 'released'"
        " AND detail->'bulk'->>'reason' = 'bad model' AND detail->>'outcome' = 'abandoned'"
    )
    assert events == 3


async def test_release_of_a_last_attempt_parks_the_unit(ledger: Ledger) -> None:
    """A release that ends a unit's last allowed attempt parks it in waiting with the
    ledger's question, as a single release does."""
    await ledger.register([NewUnit("last", "fleet-a", "orders", max_attempts=1)], OPERATOR)
    await ledger.claim_named("last", "agent-1")
    dry = await ledger.bulk(BulkAction.RELEASE, ORDERS, OPERATOR, reason="r")
    real = await ledger.bulk(BulkAction.RELEASE, ORDERS, OPERATOR, reason="r", dry_run=False)
    assert answer(dry) == answer(real)
    assert [c.to_state for c in real.changed] == [State.WAITING]
    detail = await ledger.get_unit("last")
    assert detail.unit.state is State.WAITING
    assert [q.asked_by for q in detail.questions] == ["work-ledger"]


async def test_a_failure_midway_leaves_nothing(
    ledger: Ledger, units: UnitFactory, raw: asyncpg.Connection, snapshot: Snapshot
) -> None:
    """A trigger that refuses the third unit's event fails the whole run: no unit changed,
    no event appended (all of `changed` or nothing)."""
    for _ in range(5):
        await units.place(State.READY)
    await raw.execute(
        """
        CREATE SEQUENCE test_seen;
        CREATE FUNCTION test_refuse_third() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF nextval('test_seen') = 3 THEN
                RAISE EXCEPTION 'the third one' USING CONSTRAINT = 'test_refuse_third';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_refuse_third BEFORE INSERT ON work_unit_events
            FOR EACH ROW EXECUTE FUNCTION test_refuse_third();
        """
    )
    before = await snapshot()
    with pytest.raises(InvariantViolation) as refused:
        await ledger.bulk(
            BulkAction.DISPOSE,
            ORDERS,
            OPERATOR,
            reason="r",
            disposition=Disposition.DROPPED,
            dry_run=False,
        )
    assert refused.value.invariant == "test_refuse_third"
    assert await raw.fetchval("SELECT last_value FROM test_seen") == 3
    assert await snapshot() == before


async def test_more_matches_than_limit_is_refused(
    ledger: Ledger, units: UnitFactory, snapshot: Snapshot
) -> None:
    """More units matched than `limit` is a 422 naming the count; nothing changes."""
    for _ in range(4):
        await units.place(State.READY)
    before = await snapshot()
    with pytest.raises(InvalidInput) as refused:
        await ledger.bulk(
            BulkAction.DISPOSE,
            ORDERS,
            OPERATOR,
            reason="r",
            disposition=Disposition.DROPPED,
            dry_run=False,
            limit=3,
        )
    assert "matches 4 units, more than limit 3" in refused.value.detail
    assert refused.value.extra == {"matched": 4, "limit": 3}
    assert await snapshot() == before
    exact = await ledger.bulk(
        BulkAction.DISPOSE, ORDERS, OPERATOR, reason="r", disposition=Disposition.DROPPED, limit=4
    )
    assert len(exact.changed) == 4


async def test_filters_narrow_the_match(ledger: Ledger) -> None:
    """fleet, domain, state and external_ref_prefix each narrow what is matched."""
    await ledger.register(
        [
            NewUnit("billing/a", "fleet-a", "billing"),
            NewUnit("billing/b", "fleet-a", "billing"),
            NewUnit("orders/a", "fleet-a", "orders"),
            NewUnit("billing/c", "fleet-b", "billing"),
        ],
        OPERATOR,
    )
    cases = {
        BulkFilter("fleet-a"): 3,
        BulkFilter("fleet-a", domain="billing"): 2,
        BulkFilter("fleet-a", external_ref_prefix="billing/"): 2,
        BulkFilter("fleet-a", external_ref_prefix="billing/%"): 0,
        BulkFilter("fleet-a", states=(State.WAITING,)): 0,
        BulkFilter("fleet-b"): 1,
    }
    for where, matched in cases.items():
        result = await ledger.bulk(
            BulkAction.DISPOSE, where, OPERATOR, reason="r", disposition=Disposition.DROPPED
        )
        assert (where, result.matched) == (where, matched)


@pytest.mark.parametrize(
    ("action", "disposition", "reason", "limit", "says"),
    [
        (BulkAction.DISPOSE, None, "r", 10, "needs a disposition"),
        (BulkAction.RELEASE, Disposition.DEAD, "r", 10, "takes no disposition"),
        (BulkAction.RELEASE, None, "  ", 10, "needs a reason"),
        (BulkAction.RELEASE, None, "r", 0, "limit must be"),
        (BulkAction.RELEASE, None, "r", 10_001, "limit must be"),
    ],
)
async def test_bad_input_is_refused(
    ledger: Ledger,
    action: BulkAction,
    disposition: Disposition | None,
    reason: str,
    limit: int,
    says: str,
) -> None:
    """Each input rule is a 422 saying what to send instead."""
    with pytest.raises(InvalidInput, match=says):
        await ledger.bulk(
            action, ORDERS, OPERATOR, reason=reason, disposition=disposition, limit=limit
        )


class CountingStore(Store):
    """A store that counts the statements it sends."""

    sent: ClassVar[list[str]] = []

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        self.sent.append(name)
        return await super().fetch(name, *args)

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        self.sent.append(name)
        return await super().fetchrow(name, *args)


async def test_a_real_run_is_one_statement(ledger: Ledger, pool: Pool) -> None:
    """1000 units disposed, and 1000 released, each in one statement: one round trip."""
    refs = [f"u{i:04d}" for i in range(1000)]
    await ledger.register([NewUnit(r, "fleet-a", "orders") for r in refs], OPERATOR)
    counted = Ledger(CountingStore(pool))
    CountingStore.sent.clear()
    result = await counted.bulk(
        BulkAction.DISPOSE,
        ORDERS,
        OPERATOR,
        reason="r",
        disposition=Disposition.DROPPED,
        dry_run=False,
    )
    assert (len(result.changed), CountingStore.sent) == (1000, ["bulk_dispose_units"])


async def test_bulk_migrated_closes_verified_units(ledger: Ledger, units: UnitFactory) -> None:
    """MIGRATED closes verified units (done) and skips the rest."""
    verified = (await units.place(State.VERIFIED)).unit
    ready = (await units.place(State.READY)).unit
    result = await ledger.bulk(
        BulkAction.DISPOSE,
        ORDERS,
        OPERATOR,
        reason="signed off",
        disposition=Disposition.MIGRATED,
        dry_run=False,
    )
    assert [(c.id, c.to_state) for c in result.changed] == [(verified.id, State.DONE)]
    assert [s.id for s in result.skipped] == [ready.id]
    assert (await ledger.get_unit(verified.external_ref)).unit.disposition is Disposition.MIGRATED


async def test_bulk_racing_claimers_answers_the_truth(
    database_url: str, raw: asyncpg.Connection, pool: Pool
) -> None:
    """16 agents claim while a bulk DROPPED of the ready units runs: no unit is both
    claimed and dropped, every dropped unit has its event of the run, and the answer's
    `changed` is exactly the units the run dropped."""
    async with racing_ledgers(database_url, 17) as ledgers:
        refs = [f"u{i:04d}" for i in range(400)]
        await ledgers[0].register([NewUnit(r, "fleet-a", "orders") for r in refs], OPERATOR)
        ready = BulkFilter("fleet-a", states=(State.READY,))
        claimed: list[str] = []

        async def agent(ledger: Ledger, name: str) -> None:
            for _ in range(10):
                claim = await ledger.claim(name)
                if claim.unit is None:
                    return
                claimed.append(claim.unit.external_ref)
                await ledger.start(claim.unit.external_ref, Actor(name))
                await ledger.dispose(claim.unit.external_ref, Disposition.DEAD, OPERATOR)

        async def bulk() -> BulkResult:
            await asyncio.sleep(0.01)
            return await ledgers[16].bulk(
                BulkAction.DISPOSE,
                ready,
                OPERATOR,
                reason="race",
                disposition=Disposition.DROPPED,
                dry_run=False,
            )

        *_, result = await asyncio.gather(
            *(agent(ledgers[n], f"agent-{n}") for n in range(16)), bulk()
        )
    dropped = await raw.fetch(
        "SELECT u.external_ref FROM work_units AS u JOIN work_unit_events AS e"
        " ON e.unit_id = u.id AND e.detail->'bulk'->>'operation' = $1"
        " WHERE u.disposition = 'DROPPED'",
        str(result.operation),
    )
    changed = {c.external_ref for c in result.changed}
    assert changed == {r["external_ref"] for r in dropped}
    assert changed.isdisjoint(claimed)
    assert len(changed) + len(claimed) == 400
    assert claimed  # the claims sent before the run won their units
    assert await Ledger(Store(pool)).audit() == []
    assert result.skipped == []


async def last_event(raw: asyncpg.Connection, unit_id: object) -> dict[str, Any]:
    row = await raw.fetchrow(
        "SELECT event_type, from_state::text, to_state::text,"
        " attempt_id IS NOT NULL AS has_attempt, detail::text FROM work_unit_events"
        " WHERE unit_id = $1 ORDER BY id DESC LIMIT 1",
        unit_id,
    )
    assert row is not None
    event = dict(row)
    detail = json.loads(event.pop("detail"))
    detail.pop("bulk", None)
    if "cancelled_question_ids" in detail:
        detail["cancelled_question_ids"] = len(detail["cancelled_question_ids"])
    detail.pop("question_id", None)
    return {**event, **detail}


@pytest.mark.parametrize(
    ("state", "disposition"),
    [
        (State.BLOCKED, Disposition.DEFERRED),
        (State.IN_PROGRESS, Disposition.DEAD),
        (State.WAITING, Disposition.DROPPED),
        (State.IN_PROGRESS, None),
        (State.CLAIMED, None),
    ],
)
async def test_each_unit_gets_the_event_a_single_write_appends(
    ledger: Ledger,
    units: UnitFactory,
    raw: asyncpg.Connection,
    state: State,
    disposition: Disposition | None,
) -> None:
    """A unit changed by a bulk run gets the event a single dispose (or release) by an
    operator appends, field for field, plus `detail.bulk`."""
    alone = (await units.place(state)).unit
    bulked = (await units.place(state)).unit
    if disposition is None:
        await ledger.release(alone.external_ref, OPERATOR, reason="r")
        action = BulkAction.RELEASE
    else:
        await ledger.dispose(alone.external_ref, disposition, OPERATOR, reason="r")
        action = BulkAction.DISPOSE
    where = dataclasses.replace(ORDERS, external_ref_prefix=bulked.external_ref)
    result = await ledger.bulk(
        action, where, OPERATOR, reason="r", disposition=disposition, dry_run=False
    )
    assert [c.id for c in result.changed] == [bulked.id]
    assert await last_event(raw, bulked.id) == await last_event(raw, alone.id)
    single = await ledger.get_unit(alone.external_ref)
    bulk = await ledger.get_unit(bulked.external_ref)
    assert (bulk.unit.state, bulk.unit.failed_attempts) == (
        single.unit.state,
        single.unit.failed_attempts,
    )
    assert [a.outcome for a in bulk.attempts] == [a.outcome for a in single.attempts]
    assert [q.status for q in bulk.questions] == [q.status for q in single.questions]
    assert await ledger.audit() == []  # the event log replays to the same rows
