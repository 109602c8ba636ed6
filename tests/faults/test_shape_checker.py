"""The shape-and-money checker is not vacuous: each rule, fed a doctored history, fails.

Each test builds a small sound history (rows as the tables hold them, requests as the
workload records them), shows the rule passes it, then doctors one thing and shows the
rule reports exactly that.
"""

from __future__ import annotations

import copy
from typing import Any

from support.money_history import check_budgets, check_costs
from support.shape_history import (
    check_allowance,
    check_prerequisites,
    check_registrations,
    check_stranded,
)
from support.shape_rows import ShapeReport, Tables
from support.workload import Op

A1, A2, A3 = (
    "a1000000-0000-0000-0000-000000000000",
    "a2000000-0000-0000-0000-000000000000",
    "a3000000-0000-0000-0000-000000000000",
)


def unit(uid: str, state: str, **extra: Any) -> dict[str, Any]:
    row = {
        "id": uid,
        "external_ref": f"ref-{uid}",
        "state": state,
        "disposition": None,
        "max_attempts": 5,
        "failed_attempts": 0,
        "attempts_allowed": 5,
        "parent_id": None,
        "fleet": "f",
        "domain": "d",
        "cost_cents": 0,
    }
    return row | extra


def event(n: int, uid: str, kind: str, to: str | None, **extra: Any) -> dict[str, Any]:
    row = {
        "id": n,
        "unit_id": uid,
        "event_type": kind,
        "from_state": None,
        "to_state": to,
        "attempt_id": None,
        "agent_id": "agent",
        "cost_delta_cents": 0,
        "detail": {},
    }
    return row | extra


def op(
    n: int,
    kind: str,
    path: str,
    body: Any,
    started: float,
    ended: float,
    status: int,
    response: Any = None,
) -> Op:
    return Op(
        n,
        "agent",
        kind,
        "POST",
        path,
        body,
        f"k{n}",
        n,
        started,
        ended,
        status,
        response,
        False,
        None,
    )


def tables(events: list[Any], units: list[Any], **rest: Any) -> Tables:
    parts: dict[str, Any] = {
        "attempts": [],
        "requirements": [],
        "caps": [],
        "spent": [],
        "questions": [],
        "cost_records": [],
    }
    return Tables(events=events, units=units, **(parts | rest))


def claim_op(n: int, uid: str, attempt: str, started: float, ended: float) -> Op:
    response = {"unit": {"id": uid}, "attempt": {"id": attempt}, "resumed": False}
    return op(n, "claim", "/units/claim", {}, started, ended, 200, response)


# -- prerequisites ----------------------------------------------------------------------------


def _library_and_service() -> tuple[Tables, list[Op]]:
    """p is a library, d requires it; p is finished (event 4) before d is claimed (event 6)."""
    events = [
        event(1, "p", "registered", "ready"),
        event(2, "d", "registered", "waiting"),
        event(3, "p", "claimed", "claimed", attempt_id=A1),
        event(4, "p", "disposed", "done", attempt_id=A1, detail={"disposition": "MIGRATED"}),
        event(5, "d", "transitioned", "ready", detail={"prerequisite": "ref-p"}),
        event(6, "d", "claimed", "claimed", attempt_id=A2),
    ]
    units = [unit("p", "done", disposition="MIGRATED"), unit("d", "claimed")]
    ops = [
        claim_op(1, "p", A1, 0.0, 0.1),
        op(2, "dispose", "/units/p/dispose", {"disposition": "MIGRATED"}, 0.2, 0.3, 200),
        claim_op(3, "d", A2, 0.4, 0.5),
    ]
    return tables(
        events, units, requirements=[{"unit_id": "d", "prerequisite_id": "p", "waived_at": None}]
    ), ops


def test_a_claim_before_its_prerequisite_finished_is_caught_in_the_event_order() -> None:
    sound, ops = _library_and_service()
    report = ShapeReport()
    check_prerequisites(report, sound, ops)
    assert report.violations == []
    doctored = copy.deepcopy(sound)
    doctored.events[5]["id"] = 3.5  # d's claim before p's disposal, in the log's order
    doctored.events.sort(key=lambda e: e["id"])
    check_prerequisites(report, doctored, ops)
    assert any("came before its prerequisite p finished" in v for v in report.violations)


def test_a_claim_acknowledged_before_anything_could_finish_the_prerequisite_is_caught() -> None:
    sound, ops = _library_and_service()
    early = [ops[0], claim_op(3, "d", A2, 0.05, 0.15), ops[1]]  # the claim came back first
    report = ShapeReport()
    check_prerequisites(report, sound, early)
    assert any("before any request that could finish" in v for v in report.violations)


def test_a_waiver_counts_as_the_prerequisite_done_and_a_missing_one_is_caught() -> None:
    sound, ops = _library_and_service()
    waived = copy.deepcopy(sound)
    waived.units[0] |= {"state": "abandoned", "disposition": "DEAD"}
    waived.events[3] = event(
        4, "d", "waived", "ready", from_state="waiting", detail={"prerequisite_id": "p"}
    )
    ops = [ops[0], op(2, "waive", "/units/d/waive", {"prerequisite": "p"}, 0.2, 0.3, 200), ops[2]]
    report = ShapeReport()
    check_prerequisites(report, waived, ops)
    assert report.violations == []
    waived.events[3]["detail"] = {"prerequisite_id": "another"}
    check_prerequisites(report, waived, ops)
    assert any("came before its prerequisite p" in v for v in report.violations)


# -- stranded ---------------------------------------------------------------------------------


def test_a_unit_left_waiting_with_its_prerequisite_finished_is_stranded() -> None:
    sound, _ = _library_and_service()
    sound.events = sound.events[:4]  # d never became ready
    sound.units[1]["state"] = "waiting"
    report = ShapeReport()
    check_stranded(report, sound)
    assert any("stranded waiting (events)" in v for v in report.violations)
    assert any("stranded waiting (tables)" in v for v in report.violations)
    unfinished = copy.deepcopy(sound)  # p still in progress: d rightly waits
    unfinished.events = unfinished.events[:3]
    unfinished.units[0] |= {"state": "claimed", "disposition": None}
    report = ShapeReport()
    check_stranded(report, unfinished)
    assert report.violations == []


def test_a_parked_unit_with_its_question_open_is_not_stranded() -> None:
    events = [
        event(1, "u", "registered", "ready"),
        event(2, "u", "claimed", "claimed", attempt_id=A1),
        event(3, "u", "released", "waiting", attempt_id=A1, detail={"outcome": "failed"}),
    ]
    parked = tables(
        events,
        [unit("u", "waiting", max_attempts=1, failed_attempts=1, attempts_allowed=1)],
        questions=[{"unit_id": "u", "status": "open", "asked_by": "work-ledger"}],
    )
    report = ShapeReport()
    check_stranded(report, parked)
    assert report.violations == []
    parked.questions[0]["status"] = "answered"  # answered, yet still waiting: stranded
    check_stranded(report, parked)
    assert any("stranded waiting (tables)" in v for v in report.violations)


# -- attempt allowance ------------------------------------------------------------------------


def _poison(parked: bool) -> Tables:
    """u allows 1 attempt: it fails, is parked (or not), answered, claimed and fails again."""
    events = [
        event(1, "u", "registered", "ready"),
        event(2, "u", "claimed", "claimed", attempt_id=A1),
        event(3, "u", "released", "waiting" if parked else "ready", attempt_id=A1),
        event(4, "u", "unblocked", "ready", from_state="waiting", detail={"attempts_allowed": 2}),
        event(5, "u", "claimed", "claimed", attempt_id=A2),
        event(6, "u", "released", "waiting", attempt_id=A2),
    ]
    if not parked:
        del events[3]
    attempts = [
        {"id": A1, "unit_id": "u", "outcome": "failed", "cost_cents": 0},
        {"id": A2, "unit_id": "u", "outcome": "failed", "cost_cents": 0},
    ]
    row = unit("u", "waiting", max_attempts=1, failed_attempts=2, attempts_allowed=2)
    return tables(
        events,
        [row],
        attempts=attempts,
        questions=[
            {"unit_id": "u", "status": "answered", "asked_by": "work-ledger"},
            {"unit_id": "u", "status": "open", "asked_by": "work-ledger"},
        ],
    )


def test_a_claim_past_the_allowance_and_a_limit_that_did_not_park_are_caught() -> None:
    answer = op(9, "unblock", "/units/u/unblock", {"answer": "go"}, 0.0, 0.1, 200)
    report = ShapeReport()
    check_allowance(report, _poison(parked=True), [answer])
    assert report.violations == []
    check_allowance(report, _poison(parked=False), [answer])
    assert any("reached its allowance (1 of 1) and was not parked" in v for v in report.violations)
    assert any(
        "started attempt 2 of unit ref-u after 1 failed attempts, allowance 1" in v
        for v in report.violations
    )


def test_more_failed_attempts_than_the_answers_allow_is_caught_from_the_tables() -> None:
    report = ShapeReport()
    check_allowance(report, _poison(parked=True), [])  # no answer was ever sent
    assert any(
        "failed 2 attempts with max_attempts 1 and 0 answers" in v for v in report.violations
    )


def test_an_answer_that_allows_the_wrong_number_is_caught() -> None:
    doctored = _poison(parked=True)
    doctored.events[3]["detail"]["attempts_allowed"] = 7
    report = ShapeReport()
    check_allowance(report, doctored, [op(9, "unblock", "/units/u/unblock", {}, 0, 0.1, 200)])
    assert any("answer allows 7, not 2" in v for v in report.violations)


# -- budgets ----------------------------------------------------------------------------------


def _spent_scope(raise_in_flight: bool) -> tuple[Tables, list[Op]]:
    """A 100 cent cap on f/d; 150 cents recorded on u (acknowledged at 0.3); v claimed,
    sent at 0.5 (event 5, after the cost event 3)."""
    events = [
        event(1, "u", "claimed", "claimed", attempt_id=A1),
        event(3, "u", "cost_recorded", None, attempt_id=A1, cost_delta_cents=150),
        event(5, "v", "claimed", "claimed", attempt_id=A2),
    ]
    attempts = [
        {"id": A1, "unit_id": "u", "outcome": None, "cost_cents": 150},
        {"id": A2, "unit_id": "v", "outcome": None, "cost_cents": 0},
    ]
    cap = {"fleet": "f", "domain": "d", "cap_cents": 100}
    ops = [
        op(1, "budget", "/budgets", cap, 0.0, 0.05, 200),
        op(2, "cost", f"/attempts/{A1}/cost", {"cost_cents": 150}, 0.2, 0.3, 200),
        claim_op(3, "v", A2, 0.5, 0.6),
    ]
    if raise_in_flight:
        ops.append(op(4, "budget", "/budgets", cap | {"cap_cents": 1000}, 0.45, 0.7, 200))
    units = [unit("u", "claimed", cost_cents=150), unit("v", "claimed")]
    caps = [
        {"fleet": "f", "domain": "d", "cap_cents": 100},
        {"fleet": "f", "domain": "d", "cap_cents": 1000},
    ]
    return tables(events, units, attempts=attempts, caps=caps), ops


def test_a_claim_in_a_spent_scope_is_caught_and_a_raise_in_flight_excuses_it() -> None:
    spent, ops = _spent_scope(raise_in_flight=False)
    report = ShapeReport()
    check_budgets(report, spent, ops)
    assert any("while 150 of a 100 cent cap was spent" in v for v in report.violations)
    raised, ops = _spent_scope(raise_in_flight=True)
    report = ShapeReport()
    check_budgets(report, raised, ops)
    assert report.violations == []


def test_a_claim_event_before_a_cost_acknowledged_before_the_claim_is_caught() -> None:
    raised, ops = _spent_scope(raise_in_flight=True)
    raised.events[1]["id"] = 7  # the log says the cost came after the claim: impossible
    report = ShapeReport()
    check_budgets(report, raised, ops)
    assert any("is before cost events [7]" in v for v in report.violations)


def test_a_budget_refusal_naming_spend_under_the_cap_is_caught() -> None:
    sound, ops = _spent_scope(raise_in_flight=True)
    body = {"invariant": "budget_exhausted", "budget": {"spent_cents": 90, "cap_cents": 100}}
    refused = op(8, "claim_named", "/units/v/claim", {}, 1.0, 1.1, 409, body)
    report = ShapeReport()
    check_budgets(report, sound, [*ops, refused])
    assert any("refused budget_exhausted" in v for v in report.violations)


# -- costs ------------------------------------------------------------------------------------


def test_costs_that_disagree_with_their_records_are_caught() -> None:
    record = {
        "attempt_id": A1,
        "unit_id": "u",
        "cost_cents": 150,
        "model": "m",
        "input_tokens": 10,
        "output_tokens": 0,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
    }
    sound = tables(
        [],
        [unit("u", "claimed", cost_cents=150)],
        attempts=[{"id": A1, "unit_id": "u", "outcome": None, "cost_cents": 150}],
        cost_records=[record],
        spent=[{"fleet": "f", "domain": "d", "spent": 150}],
    )
    sent = op(
        1,
        "cost",
        f"/attempts/{A1}/cost",
        {"cost_cents": 150, "model": "m", "input_tokens": 10},
        0,
        0.1,
        200,
    )
    report = ShapeReport()
    check_costs(report, sound, [sent])
    assert report.violations == []
    doctored = copy.deepcopy(sound)
    doctored.cost_records[0]["input_tokens"] = 11
    doctored.attempts[0]["cost_cents"] = 151
    doctored.spent[0]["spent"] = 149
    check_costs(report, doctored, [sent])
    assert any("is not in cost_records" in v for v in report.violations)
    assert any(f"attempt {A1} costs 151" in v for v in report.violations)
    assert any("budget f/d spent 149" in v for v in report.violations)


# -- registrations ----------------------------------------------------------------------------


def test_a_lost_requirement_and_the_counted_refusal_are_caught() -> None:
    batch = {"units": [{"external_ref": "ref-p"}, {"external_ref": "ref-d", "requires": ["ref-p"]}]}
    registered = op(1, "register", "/units", batch, 0, 0.1, 200)
    sound = tables(
        [],
        [unit("p", "ready"), unit("d", "waiting")],
        requirements=[{"unit_id": "d", "prerequisite_id": "p", "waived_at": None}],
    )
    report = ShapeReport()
    check_registrations(report, sound, [registered])
    assert report.violations == []
    sound.requirements.clear()
    refused = op(
        2, "register", "/units", batch, 0, 0.1, 409, {"invariant": "unit_prerequisites_counted"}
    )
    check_registrations(report, sound, [registered, refused])
    assert any("lacks its requirement on ref-p" in v for v in report.violations)
    assert any("refused unit_prerequisites_counted" in v for v in report.violations)
