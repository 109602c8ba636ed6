"""Random sequences of operations against a pure-Python model of DESIGN §4.

Hypothesis drives the ledger through registers, claims (pull-next and named, several
agents), starts, heartbeats, blocks, answers, cancelled questions, verifies, costs,
releases, dispositions and lapsed leases. After every step the database must agree with
the model (state, holder, attempts, cost, disposition, lease, open question) and the
audit must find nothing. Each example runs in a fresh database cloned from the template,
on an event loop of its own in the thread hypothesis runs in.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from work_ledger.db.connect import connect, create_pool, ensure_database, with_database
from work_ledger.db.store import Store
from work_ledger.domain.model import (
    HELD,
    LEASED,
    Actor,
    Claim,
    Disposition,
    NewUnit,
    Outcome,
    QuestionStatus,
    State,
)
from work_ledger.errors import (
    AttemptSuperseded,
    InvariantViolation,
    NotHolder,
    WorkLedgerError,
)
from work_ledger.service.ledger import Ledger

T = TypeVar("T")
OPERATOR = Actor("operator", privileged=True)
MAX_ATTEMPTS = 100  # DESIGN §12's highest; above STEPS below, so never reached
STEPS = 80


AGENTS = ["agent-0", "agent-1", "agent-2", "agent-3"]
EVIDENCE = "https://ci.example/run/1"
MAY_LEAVE = {
    Disposition.MIGRATED: {State.VERIFIED},
    Disposition.DROPPED: {State.READY, State.IN_PROGRESS},
    Disposition.DEFERRED: {State.READY, State.BLOCKED},
    Disposition.DEAD: {State.READY, State.IN_PROGRESS, State.BLOCKED},
}

# Three indexes in four aim at a unit in a state the rule can act on; the fourth picks any.
units_picked = st.integers(min_value=0, max_value=1000)
claimers = st.sampled_from(AGENTS)
# "holder": whoever holds the unit (or last worked on it), so that writes often succeed.
agents = st.sampled_from(["holder"] * 4 + AGENTS)
# <0: no attempt_id; 0: the live (else the last) attempt; k>0: the unit's k-th attempt.
fences = st.integers(min_value=-2, max_value=3)


@dataclass
class ModelAttempt:
    id: uuid.UUID
    agent: str
    outcome: Outcome | None = None
    cost: int = 0


@dataclass
class ModelUnit:
    ref: str
    queue_key: tuple[dt.datetime, uuid.UUID]  # (created_at, id): the ready queue's order
    state: State = State.READY
    holder: str | None = None
    disposition: Disposition | None = None
    lapsed_at: dt.datetime | None = None  # set while a lease we expired is lapsed
    attempts: list[ModelAttempt] = field(default_factory=list)
    questions: dict[uuid.UUID, QuestionStatus] = field(default_factory=dict)

    @property
    def live(self) -> ModelAttempt | None:
        last = self.attempts[-1] if self.attempts else None
        return last if last is not None and last.outcome is None else None

    @property
    def last(self) -> ModelAttempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def open_question(self) -> uuid.UUID | None:
        return next((q for q, s in self.questions.items() if s is QuestionStatus.OPEN), None)

    def begin_attempt(self, attempt_id: uuid.UUID, agent: str) -> None:
        if self.live is not None:
            self.live.outcome = Outcome.SUPERSEDED
        self.attempts.append(ModelAttempt(attempt_id, agent))
        self.state, self.holder, self.lapsed_at = State.CLAIMED, agent, None


class LedgerMachine(RuleBasedStateMachine):
    """The ledger against its model; a fresh database per example."""

    server_url: ClassVar[str]
    template: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.database = f"wl_stateful_{uuid.uuid4().hex[:12]}"
        self.run(ensure_database(self.server_url, self.database, template=self.template))
        url = with_database(self.server_url, self.database)
        self.pool = self.run(create_pool(url, min_size=1, max_size=2))
        self.raw: asyncpg.Connection = self.run(connect(url))
        self.ledger = Ledger(Store(self.pool), lease_seconds=600)
        self.units: dict[str, ModelUnit] = {}
        self.registered = 0

    def teardown(self) -> None:
        self.run(self.raw.close())
        self.run(self.pool.close())
        self.run(_drop(self.server_url, self.database))
        self.loop.close()

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coro)

    # -- helpers -----------------------------------------------------------------------------

    def pick(self, index: int, aim: frozenset[State] | set[State] = frozenset()) -> ModelUnit:
        units = list(self.units.values())
        aimed = [u for u in units if u.state in aim]
        if index % 4 != 3 and aimed:
            return aimed[index // 4 % len(aimed)]
        return units[index // 4 % len(units)]

    def any_in(self, states: frozenset[State] | set[State]) -> bool:
        return any(u.state in states for u in self.units.values())

    def who(self, unit: ModelUnit, agent: str) -> str:
        if agent != "holder":
            return agent
        return unit.holder or (unit.last.agent if unit.last else AGENTS[0])

    def held_by(self, agent: str) -> ModelUnit | None:
        return next(
            (u for u in self.units.values() if u.holder == agent and u.state in LEASED), None
        )

    def fence(self, unit: ModelUnit, choice: int) -> uuid.UUID | None:
        if choice < 0 or not unit.attempts:
            return None
        if choice == 0:
            return (unit.live or unit.attempts[-1]).id
        return unit.attempts[choice % len(unit.attempts)].id

    def refused(self, write: Awaitable[Any], expected: type[WorkLedgerError]) -> WorkLedgerError:
        """Run a write the model says must be refused, and return the ledger's error."""
        with pytest.raises(WorkLedgerError) as refused:
            self.run(write)
        assert type(refused.value) is expected, (refused.value, expected)
        return refused.value

    def unit_refusal(self, unit: ModelUnit, actor: Actor, fence_ok: bool) -> type[WorkLedgerError]:
        """The error class the service gives for a refused unit write (see Ledger._refused)."""
        if not fence_ok:
            return AttemptSuperseded
        if not actor.privileged:
            holder = unit.holder if unit.state in HELD else (unit.last.agent if unit.last else None)
            if unit.state is State.READY or holder != actor.name:
                return NotHolder
        return InvariantViolation

    def register_units(self, count: int) -> None:
        refs = [f"u-{self.registered + i:02d}" for i in range(count)]
        self.registered += count
        result = self.run(
            self.ledger.register(
                # The model has no attempt limit (tests/db/test_attempt_limit.py covers it):
                # the highest limit is more than a run's steps can spend.
                [NewUnit(r, "fleet-a", "orders", max_attempts=MAX_ATTEMPTS) for r in refs],
                OPERATOR,
            )
        )
        assert [(r.external_ref, r.created) for r in result] == [(r, True) for r in refs]
        rows = self.run(
            self.raw.fetch(
                "SELECT external_ref, created_at, id FROM work_units WHERE external_ref = ANY($1)",
                refs,
            )
        )
        for row in rows:
            self.units[row["external_ref"]] = ModelUnit(
                row["external_ref"], (row["created_at"], row["id"])
            )

    def check_claim(self, claim: Claim, agent: str, unit: ModelUnit, resumed: bool) -> None:
        assert claim.unit is not None
        assert claim.attempt is not None
        assert (claim.unit.external_ref, claim.resumed) == (unit.ref, resumed)
        if resumed:
            assert unit.live is not None
            assert claim.attempt.id == unit.live.id
            unit.lapsed_at = None  # asking again renews the lease
        else:
            unit.begin_attempt(claim.attempt.id, agent)
        assert (claim.attempt.agent_id, claim.attempt.attempt_no) == (agent, len(unit.attempts))

    # -- rules -----------------------------------------------------------------------------

    @initialize(count=st.integers(min_value=2, max_value=5))
    def register(self, count: int) -> None:
        self.register_units(count)

    @rule(count=st.integers(min_value=1, max_value=2), index=units_picked)
    def register_more(self, count: int, index: int) -> None:
        """New units while there are few; else a known one again, which changes nothing."""
        if len(self.units) < 8:
            self.register_units(count)
            return
        unit = self.pick(index)
        result = self.run(self.ledger.register([NewUnit(unit.ref, "fleet-b", "billing")], OPERATOR))
        assert [(r.external_ref, r.created) for r in result] == [(unit.ref, False)]

    @rule(agent=claimers)
    def claim(self, agent: str) -> None:
        claim = self.run(self.ledger.claim(agent))
        held = self.held_by(agent)
        if held is not None:
            self.check_claim(claim, agent, held, resumed=True)
            return
        lapsed = [u for u in self.units.values() if u.state in LEASED and u.lapsed_at is not None]
        ready = [u for u in self.units.values() if u.state is State.READY]
        if lapsed:
            first = min(u.lapsed_at for u in lapsed if u.lapsed_at is not None)
            candidates = [u for u in lapsed if u.lapsed_at == first]
        elif ready:
            candidates = [min(ready, key=lambda u: u.queue_key)]
        else:
            assert claim == Claim(None, None)
            return
        assert claim.unit is not None
        assert claim.unit.external_ref in {u.ref for u in candidates}
        self.check_claim(claim, agent, self.units[claim.unit.external_ref], resumed=False)

    @rule(agent=agents, index=units_picked)
    def claim_named(self, agent: str, index: int) -> None:
        unit = self.pick(index, {State.READY, *LEASED})
        agent = agent if agent != "holder" else AGENTS[index % len(AGENTS)]
        held = self.held_by(agent)
        write = self.ledger.claim_named(unit.ref, agent)
        if held is unit:
            self.check_claim(self.run(write), agent, unit, resumed=True)
        elif held is None and (
            unit.state is State.READY or (unit.state in LEASED and unit.lapsed_at is not None)
        ):
            self.check_claim(self.run(write), agent, unit, resumed=False)
        else:
            error = self.refused(write, InvariantViolation)
            expected = (
                "one_live_claim_per_agent"
                if held is not None
                else "unit_claimed_only_when_claimable"
                if unit.state in HELD
                else "unit_state_transition_allowed"
            )
            assert error.invariant == expected

    @precondition(lambda m: m.any_in({State.CLAIMED}))
    @rule(agent=agents, index=units_picked, fence=fences)
    def start(self, agent: str, index: int, fence: int) -> None:
        unit = self.pick(index, {State.CLAIMED})
        agent = self.who(unit, agent)
        attempt_id = self.fence(unit, fence)
        fence_ok = attempt_id is None or (unit.live is not None and unit.live.id == attempt_id)
        write = self.ledger.start(unit.ref, Actor(agent), attempt_id=attempt_id)
        if unit.state is State.CLAIMED and unit.holder == agent and fence_ok:
            self.run(write)
            unit.state, unit.lapsed_at = State.IN_PROGRESS, None  # starting renews the lease
        else:
            self.refused(write, self.unit_refusal(unit, Actor(agent), fence_ok))

    @precondition(lambda m: m.any_in(HELD))
    @rule(agent=agents, index=units_picked, fence=fences)
    def heartbeat(self, agent: str, index: int, fence: int) -> None:
        unit = self.pick(index, HELD)
        agent = self.who(unit, agent)
        attempt_id = self.fence(unit, max(fence, 0))
        if attempt_id is None:
            return
        attempt = next(a for a in unit.attempts if a.id == attempt_id)
        write = self.ledger.heartbeat(attempt_id, Actor(agent))
        if attempt.outcome is None and unit.holder == agent:
            self.run(write)
            if unit.state in LEASED:
                unit.lapsed_at = None
        else:
            self.refused(write, NotHolder if attempt.agent != agent else AttemptSuperseded)

    @precondition(lambda m: m.any_in({State.IN_PROGRESS}))
    @rule(agent=agents, index=units_picked, fence=fences)
    def block(self, agent: str, index: int, fence: int) -> None:
        unit = self.pick(index, {State.IN_PROGRESS})
        agent = self.who(unit, agent)
        attempt_id = self.fence(unit, fence)
        fence_ok = attempt_id is None or (unit.live is not None and unit.live.id == attempt_id)
        write = self.ledger.block(unit.ref, Actor(agent), "which currency?", attempt_id=attempt_id)
        if unit.state is State.IN_PROGRESS and unit.holder == agent and fence_ok:
            _, question = self.run(write)
            unit.state, unit.lapsed_at = State.BLOCKED, None
            unit.questions[question.id] = QuestionStatus.OPEN
        else:
            self.refused(write, self.unit_refusal(unit, Actor(agent), fence_ok))

    def resume(self, unit: ModelUnit, write: Awaitable[Any], status: QuestionStatus) -> None:
        """blocked → in_progress, unless the holder has claimed another unit meanwhile."""
        question = unit.open_question
        if unit.state is not State.BLOCKED or question is None:
            error = self.refused(write, InvariantViolation)
            assert error.invariant in ("unit_state_transition_allowed", "question_status_final")
        elif unit.holder is not None and self.held_by(unit.holder) is not None:
            error = self.refused(write, InvariantViolation)
            assert error.invariant == "one_live_claim_per_agent"
        else:
            self.run(write)
            unit.state, unit.lapsed_at = State.IN_PROGRESS, None
            unit.questions[question] = status

    @precondition(lambda m: m.any_in({State.BLOCKED}))
    @rule(index=units_picked)
    def unblock(self, index: int) -> None:
        unit = self.pick(index, {State.BLOCKED})
        self.resume(
            unit, self.ledger.unblock(unit.ref, "use EUR", OPERATOR), QuestionStatus.ANSWERED
        )

    @precondition(lambda m: any(u.questions for u in m.units.values()))
    @rule(index=units_picked)
    def cancel_question(self, index: int) -> None:
        unit = self.pick(index, {State.BLOCKED})
        if not unit.questions:
            return
        question = unit.open_question or next(iter(unit.questions))
        write = self.ledger.cancel_question(question, OPERATOR, reason="asked by mistake")
        if unit.questions[question] is not QuestionStatus.OPEN:
            error = self.refused(write, InvariantViolation)
            assert error.invariant == "question_status_final"
            return
        self.resume(unit, write, QuestionStatus.CANCELLED)

    @precondition(lambda m: m.any_in({State.IN_PROGRESS}))
    @rule(agent=agents, index=units_picked, fence=fences)
    def verify(self, agent: str, index: int, fence: int) -> None:
        unit = self.pick(index, {State.IN_PROGRESS})
        agent = self.who(unit, agent)
        attempt_id = self.fence(unit, fence)
        fence_ok = attempt_id is None or (unit.live is not None and unit.live.id == attempt_id)
        write = self.ledger.verify(unit.ref, Actor(agent), EVIDENCE, attempt_id=attempt_id)
        if unit.state is State.IN_PROGRESS and unit.holder == agent and fence_ok:
            self.run(write)
            assert unit.live is not None
            unit.live.outcome = Outcome.VERIFIED
            unit.state, unit.holder, unit.lapsed_at = State.VERIFIED, None, None
        else:
            self.refused(write, self.unit_refusal(unit, Actor(agent), fence_ok))

    @precondition(lambda m: any(u.attempts for u in m.units.values()))
    @rule(
        actor=st.sampled_from(["holder", "operator", *AGENTS]),
        index=units_picked,
        fence=fences,
        cents=st.integers(min_value=1, max_value=500),
    )
    def record_cost(self, actor: str, index: int, fence: int, cents: int) -> None:
        unit = self.pick(index, set(State))
        actor = self.who(unit, actor)
        attempt_id = self.fence(unit, max(fence, 0))
        if attempt_id is None:
            return
        attempt = next(a for a in unit.attempts if a.id == attempt_id)
        who = OPERATOR if actor == "operator" else Actor(actor)
        write = self.ledger.record_cost(attempt_id, cents, who)
        if who.privileged or attempt.agent == actor:
            self.run(write)
            attempt.cost += cents
        else:
            self.refused(write, NotHolder)

    @precondition(lambda m: m.any_in(LEASED))
    @rule(
        agent=agents,
        index=units_picked,
        fence=fences,
        outcome=st.sampled_from([Outcome.FAILED, Outcome.ABANDONED]),
    )
    def release(self, agent: str, index: int, fence: int, outcome: Outcome) -> None:
        unit = self.pick(index, LEASED)
        agent = self.who(unit, agent)
        attempt_id = self.fence(unit, fence)
        fence_ok = attempt_id is None or (unit.live is not None and unit.live.id == attempt_id)
        write = self.ledger.release(unit.ref, Actor(agent), outcome=outcome, attempt_id=attempt_id)
        if unit.state in LEASED and unit.holder == agent and fence_ok:
            self.run(write)
            assert unit.live is not None
            unit.live.outcome = outcome
            unit.state, unit.holder, unit.lapsed_at = State.READY, None, None
        else:
            self.refused(write, self.unit_refusal(unit, Actor(agent), fence_ok))

    @precondition(
        lambda m: m.any_in({State.READY, State.IN_PROGRESS, State.BLOCKED, State.VERIFIED})
    )
    @rule(
        actor=st.sampled_from(["holder", "operator", *AGENTS]),
        index=units_picked,
        fence=fences,
        disposition=st.sampled_from(list(Disposition)[::-1]),
    )
    def dispose(self, actor: str, index: int, fence: int, disposition: Disposition) -> None:
        unit = self.pick(index, MAY_LEAVE[disposition])
        actor = self.who(unit, actor)
        who = OPERATOR if actor == "operator" else Actor(actor)
        attempt_id = self.fence(unit, fence)
        last = unit.last
        closable = last is not None and last.outcome in (None, Outcome.VERIFIED)
        fence_ok = attempt_id is None or (closable and last is not None and last.id == attempt_id)
        may = who.privileged or (closable and last is not None and last.agent == actor)
        write = self.ledger.dispose(unit.ref, disposition, who, attempt_id=attempt_id)
        if unit.state in MAY_LEAVE[disposition] and may and fence_ok:
            self.run(write)
            if unit.live is not None:
                blocked = unit.state is State.BLOCKED
                unit.live.outcome = Outcome.BLOCKED if blocked else Outcome.ABANDONED
            if unit.open_question is not None:
                unit.questions[unit.open_question] = QuestionStatus.CANCELLED
            done = disposition is Disposition.MIGRATED
            unit.state = State.DONE if done else State.ABANDONED
            unit.disposition, unit.holder, unit.lapsed_at = disposition, None, None
        else:
            self.refused(write, self.unit_refusal(unit, who, fence_ok))

    @precondition(lambda m: m.any_in(LEASED))
    @rule(index=units_picked)
    def expire_lease(self, index: int) -> None:
        leased = [u for u in self.units.values() if u.state in LEASED]
        if not leased:
            return
        unit = leased[index % len(leased)]
        unit.lapsed_at = self.run(
            self.raw.fetchval(
                # As if the lease's time had passed: the heartbeat moves back with it.
                "UPDATE work_units SET lease_expires_at = now() - interval '1 second',"
                " last_heartbeat_at = last_heartbeat_at - (lease_expires_at - now())"
                " - interval '1 second'"
                " WHERE external_ref = $1 RETURNING lease_expires_at",
                unit.ref,
            )
        )

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def database_agrees_with_model(self) -> None:
        rows = self.run(
            self.raw.fetch(
                """
                SELECT u.external_ref, u.state::text, u.claimed_by, u.cost_cents,
                       u.disposition::text, u.lease_expires_at < now() AS lapsed,
                       u.lease_expires_at IS NOT NULL AS leased,
                       coalesce((SELECT array_agg(
                                     row(a.id, a.agent_id, a.outcome, a.cost_cents)::text
                                     ORDER BY a.attempt_no)
                                 FROM work_unit_attempts AS a WHERE a.unit_id = u.id),
                                '{}') AS attempts,
                       coalesce((SELECT array_agg(row(q.id, q.status)::text
                                                  ORDER BY q.created_at, q.id)
                                 FROM blocking_questions AS q WHERE q.unit_id = u.id),
                                '{}') AS questions,
                       u.attempt_count
                FROM work_units AS u ORDER BY u.external_ref
                """
            )
        )
        actual = [tuple(r) for r in rows]
        expected = [self.expected_row(u) for u in sorted(self.units.values(), key=lambda u: u.ref)]
        assert actual == expected
        assert self.run(self.ledger.audit()) == []

    def expected_row(self, unit: ModelUnit) -> tuple[Any, ...]:
        leased = unit.state in LEASED
        attempts = [f"({a.id},{a.agent},{a.outcome or ''},{a.cost})" for a in unit.attempts]
        questions = [f"({q},{s})" for q, s in unit.questions.items()]
        return (
            unit.ref,
            str(unit.state),
            unit.holder,
            sum(a.cost for a in unit.attempts),
            None if unit.disposition is None else str(unit.disposition),
            (unit.lapsed_at is not None) if leased else None,
            leased,
            attempts,
            questions,
            len(unit.attempts),
        )


async def _drop(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def test_ledger_agrees_with_its_model_under_random_operations(
    server_url: str, template_name: str
) -> None:
    """Random operation sequences: after every step the database equals the model, audit clean."""
    machine = type(
        "Machine", (LedgerMachine,), {"server_url": server_url, "template": template_name}
    )
    await asyncio.to_thread(
        run_state_machine_as_test,
        machine,
        settings=settings(
            max_examples=20,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
