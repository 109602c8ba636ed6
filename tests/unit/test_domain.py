"""The vocabulary and the allowed map, checked without a database."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from work_ledger.domain import (
    DISPOSITIONS_FROM,
    HELD,
    LEASED,
    NEXT_ACTIONS,
    TERMINAL,
    TRANSITIONS,
    Actor,
    Attempt,
    Disposition,
    Outcome,
    State,
    Unit,
    dispositions_allowed_from,
    states_disposable_as,
)


def test_transitions_cover_every_state() -> None:
    """Every state has an entry in the map, and every target is a state."""
    assert set(TRANSITIONS) == set(State)
    assert all(targets <= set(State) for targets in TRANSITIONS.values())


def test_terminal_states_have_no_way_out() -> None:
    """done and abandoned lead nowhere; every other state leads somewhere."""
    assert {s for s, targets in TRANSITIONS.items() if not targets} == TERMINAL
    assert {State.DONE, State.ABANDONED} == TERMINAL


def test_every_state_is_reachable_from_ready() -> None:
    """Walking the map from ready reaches all seven states."""
    seen, frontier = {State.READY}, [State.READY]
    while frontier:
        for target in TRANSITIONS[frontier.pop()]:
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    assert seen == set(State)


def test_only_leased_states_can_be_reclaimed() -> None:
    """claimed is reachable from ready (claim) and from the leased states (stale reclaim)."""
    assert {s for s, t in TRANSITIONS.items() if State.CLAIMED in t} == {State.READY} | LEASED
    assert LEASED < HELD
    assert {State.BLOCKED} == HELD - LEASED


def test_dispositions_follow_the_map() -> None:
    """MIGRATED closes to done and the others to abandoned, only where the map allows it."""
    for state, dispositions in DISPOSITIONS_FROM.items():
        for disposition in dispositions:
            target = State.DONE if disposition is Disposition.MIGRATED else State.ABANDONED
            assert target in TRANSITIONS[state], (state, disposition)
    closers = {s for s, t in TRANSITIONS.items() if t & TERMINAL}
    assert set(DISPOSITIONS_FROM) == closers


@pytest.mark.parametrize(
    ("disposition", "states"),
    [
        (Disposition.MIGRATED, [State.VERIFIED]),
        (Disposition.DROPPED, [State.READY, State.IN_PROGRESS]),
        (Disposition.DEFERRED, [State.READY, State.BLOCKED]),
        (Disposition.DEAD, [State.READY, State.IN_PROGRESS, State.BLOCKED]),
    ],
)
def test_states_disposable_as_reads_the_design_table(
    disposition: Disposition, states: list[State]
) -> None:
    """Each disposition closes units from exactly the states of DESIGN §4."""
    assert sorted(states_disposable_as(disposition)) == sorted(states)


def test_dispositions_allowed_from_a_state_without_any_is_empty() -> None:
    """claimed, done and abandoned cannot be disposed."""
    for state in (State.CLAIMED, State.DONE, State.ABANDONED):
        assert dispositions_allowed_from(state) == frozenset()


def test_next_actions_are_empty_only_for_terminal_states() -> None:
    """An agent is always told what it may do next, except when nothing is left to do."""
    assert set(NEXT_ACTIONS) == set(State)
    assert {s for s, actions in NEXT_ACTIONS.items() if not actions} == TERMINAL


def test_actor_holder_is_none_only_when_privileged() -> None:
    """The SQL guards check the holder for agents and skip it for operators."""
    assert Actor("agent-1").holder == "agent-1"
    assert Actor("operator", privileged=True).holder is None


def test_unit_from_record_turns_text_into_enums() -> None:
    """A unit read from the database carries State and Disposition members, not strings."""
    now = dt.datetime.now(dt.UTC)
    record = {
        "id": uuid.uuid4(),
        "created_at": now,
        "updated_at": now,
        "external_ref": "orders/refunds",
        "fleet": "fleet-a",
        "domain": "orders",
        "state": "done",
        "disposition": "MIGRATED",
        "disposed_at": now,
        "workflow_id": None,
        "claimed_by": None,
        "lease_expires_at": None,
        "last_heartbeat_at": None,
        "attempt_count": 1,
        "cost_cents": 250,
        "evidence_urls": ["https://ci.example/run/1"],
        "ignored": "extra columns are not read",
    }
    unit = Unit.from_record(record)
    assert (unit.state, unit.disposition) == (State.DONE, Disposition.MIGRATED)
    assert type(unit.state) is State
    assert type(unit.disposition) is Disposition


def test_attempt_is_live_until_it_has_an_outcome() -> None:
    """An attempt without an outcome is live; with one, it has ended."""
    now = dt.datetime.now(dt.UTC)
    fields = {
        "id": uuid.uuid4(),
        "unit_id": uuid.uuid4(),
        "attempt_no": 1,
        "agent_id": "agent-1",
        "started_at": now,
        "cost_cents": 0,
        "evidence_url": None,
    }
    running = Attempt.from_record({**fields, "outcome": None, "ended_at": None})
    ended = Attempt.from_record({**fields, "outcome": "superseded", "ended_at": now})
    assert running.live is True
    assert (ended.live, ended.outcome) == (False, Outcome.SUPERSEDED)
