"""The vocabulary and the allowed map, checked without a database."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from work_ledger.domain.model import (
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
        (Disposition.DROPPED, [State.READY, State.WAITING, State.IN_PROGRESS]),
        (Disposition.DEFERRED, [State.READY, State.WAITING, State.BLOCKED]),
        (Disposition.DEAD, [State.READY, State.WAITING, State.IN_PROGRESS, State.BLOCKED]),
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
    """A unit read from the database (its row value: fields in column order) carries State
    and Disposition members, not strings; a row with a column added after its own is read
    the same, a shorter one is refused."""
    now = dt.datetime.now(dt.UTC)
    record = (
        uuid.uuid4(),  # id
        now,  # created_at
        now,  # updated_at
        "orders/refunds",  # external_ref
        "fleet-a",  # fleet
        "orders",  # domain
        "done",  # state
        "MIGRATED",  # disposition
        now,  # disposed_at
        None,  # workflow_id
        None,  # claimed_by
        None,  # lease_expires_at
        None,  # last_heartbeat_at
        1,  # attempt_count
        250,  # cost_cents
        ["https://ci.example/run/1"],  # evidence_urls
        None,  # parent_id
        5,  # max_attempts
        5,  # attempts_allowed
        0,  # failed_attempts
        0,  # unfinished_prerequisites
        None,  # exclusive (none)
    )
    unit = Unit.from_record(record)
    assert unit.exclusive == []
    assert (unit.external_ref, unit.cost_cents) == ("orders/refunds", 250)
    assert (unit.state, unit.disposition) == (State.DONE, Disposition.MIGRATED)
    assert type(unit.state) is State
    assert type(unit.disposition) is Disposition
    # A column the next release adds comes last: this release reads the same unit.
    assert Unit.from_record((*record, "a column the next release added")) == unit
    with pytest.raises(TypeError):
        Unit.from_record(record[:-1])


def test_attempt_is_live_until_it_has_an_outcome() -> None:
    """An attempt without an outcome is live; with one, it has ended."""
    now = dt.datetime.now(dt.UTC)
    fields = (uuid.uuid4(), uuid.uuid4(), 1, "agent-1", now)  # id … started_at
    running = Attempt.from_record((*fields, None, 0, None, None))
    ended = Attempt.from_record((*fields, "superseded", 0, None, now))
    assert running.live is True
    assert (ended.live, ended.outcome) == (False, Outcome.SUPERSEDED)
