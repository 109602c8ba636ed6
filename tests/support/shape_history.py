"""The history checker for the work's shape and money (DESIGN §12), beside history.py.

Each rule is checked from the event log (by event order, never by a clock) and, where the
recorded history knows something the log cannot, from the history too:
- prerequisites: every claim event comes after, by event id, the finishing event (disposed
  MIGRATED or DROPPED) or the waiver of every prerequisite its unit required then (a split
  child is required from its own `registered` event on); and no acknowledged claim of a
  unit came back before a request that could finish one of its declared prerequisites was
  even sent;
- stranded: at the end no unit is `waiting` with every prerequisite finished or waived,
  unless it was parked at its attempt limit and its question is open (tables and replayed
  events alike);
- allowance: replaying each unit's events, the attempt ends that count (released failed or
  abandoned, superseded by a reclaim, disposed from in progress) never reach the
  allowance without the ending parking the unit, no claim starts at or past it, an answer
  sets it to failed + max_attempts; and from the tables and the history, no unit failed
  more attempts than max_attempts times (1 + the answers given to its questions);
- budgets: no acknowledged new claim (stale reclaims included) in a scope whose spend,
  counting only cost events acknowledged before the claim was sent (committed before the
  claim's statement could read the spend; DESIGN §12 lets a claim racing a cost record
  through), had reached the most lenient cap that could be in force, and every such cost
  event is before the claim event in the log; a 409 budget_exhausted names spent >= cap;
- costs: the cost records add up to each attempt, the attempts to each unit, the units to
  each budget scope's spent; every acknowledged record is there with its model and tokens;
- registrations: every acknowledged batch's units exist with the requirements it sent, and
  no batch was refused unit_prerequisites_counted (the race fixed by migration 0018).
The rules are functions of plain rows (`Tables`), so tests/faults/test_shape_checker.py
feeds them doctored ones and shows each rule fail.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from support.money_history import check_budgets, check_costs
from support.shape_rows import (
    FAILED,
    Row,
    ShapeReport,
    Tables,
    acked_claims,
    claim_event_id,
    finishes,
    is_claim,
    parks,
)
from support.workload import Op

__all__ = ["check_budgets", "check_costs", "check_shape"]


def check_shape(tables: Tables, ops: list[Op]) -> ShapeReport:
    report = ShapeReport()
    c = report.counts
    c["requests"] = len(ops)
    c["claims"] = sum(1 for e in tables.events if is_claim(e))
    c["stale reclaims"] = sum(
        1 for e in tables.events if is_claim(e) and e["event_type"] != "claimed"
    )
    c["splits"] = sum(1 for e in tables.events if e["event_type"] == "split")
    c["parks"] = sum(1 for e in tables.events if parks(e))
    c["waivers"] = sum(1 for e in tables.events if e["event_type"] == "waived")
    c["units released by a prerequisite"] = sum(
        1 for e in tables.events if e["event_type"] == "transitioned" and e["attempt_id"] is None
    )
    c["requirements"] = len(tables.requirements)
    c["cap changes"] = len(tables.caps)
    c["cost records"] = len(tables.cost_records)
    c["units"] = len(tables.units)
    refusals = Counter(op.refusal for op in ops if op.status is not None and op.status >= 400)
    for name in ("budget_exhausted", "prerequisites_unfinished", "attempt_limit_reached"):
        c[f"refused {name}"] = refusals[name]
    check_prerequisites(report, tables, ops)
    check_stranded(report, tables)
    check_allowance(report, tables, ops)
    check_budgets(report, tables, ops)
    check_costs(report, tables, ops)
    check_registrations(report, tables, ops)
    return report


def _unit_events(tables: Tables) -> dict[Any, list[Row]]:
    by_unit: dict[Any, list[Row]] = defaultdict(list)
    for event in tables.events:
        by_unit[str(event["unit_id"])].append(event)
    return by_unit


def _prerequisites(tables: Tables) -> dict[str, list[str]]:
    required: dict[str, list[str]] = defaultdict(list)
    for edge in tables.requirements:
        required[str(edge["unit_id"])].append(str(edge["prerequisite_id"]))
    return required


def check_prerequisites(report: ShapeReport, tables: Tables, ops: list[Op]) -> None:
    registered = {
        str(e["unit_id"]): e["id"] for e in tables.events if e["event_type"] == "registered"
    }
    finished = {str(e["unit_id"]): e["id"] for e in tables.events if finishes(e)}
    waived = {
        (str(e["unit_id"]), e["detail"]["prerequisite_id"]): e["id"]
        for e in tables.events
        if e["event_type"] == "waived"
    }
    required = _prerequisites(tables)
    for event in tables.events:
        if not is_claim(event):
            continue
        unit = str(event["unit_id"])
        for prerequisite in required[unit]:
            if registered.get(prerequisite, 0) > event["id"]:
                continue  # a split's child: required from the split on, after this claim
            done_at = min(
                finished.get(prerequisite, 1 << 62), waived.get((unit, prerequisite), 1 << 62)
            )
            if done_at > event["id"]:
                report.violations.append(
                    f"claim event {event['id']} of unit {unit} came before its prerequisite "
                    f"{prerequisite} finished or was waived"
                )
    # From the history: a claim acknowledged before anything could finish a prerequisite.
    could_finish: dict[tuple[str, str], float] = {}  # (unit or '*', prerequisite) -> first sent
    for op in ops:
        body, parts = op.body or {}, op.path.split("/")
        if op.kind == "dispose" and body.get("disposition") in ("MIGRATED", "DROPPED"):
            key = ("*", parts[2])
        elif op.kind == "waive":
            key = (parts[2], body["prerequisite"])
        else:
            continue
        could_finish[key] = min(could_finish.get(key, op.started), op.started)
    for _, acked in acked_claims(ops):
        unit = acked.response["unit"]["id"]
        for prerequisite in required[unit]:
            if registered.get(prerequisite, 0) > claim_event_id(tables, acked):
                continue
            earliest = min(
                could_finish.get(("*", prerequisite), 1e18),
                could_finish.get((unit, prerequisite), 1e18),
            )
            if earliest > acked.ended:
                report.violations.append(
                    f"claim #{acked.n} of unit {unit} was acknowledged before any request that "
                    f"could finish its prerequisite {prerequisite} was sent"
                )


def check_stranded(report: ShapeReport, tables: Tables) -> None:
    by_id = {str(u["id"]): u for u in tables.units}
    required = _prerequisites(tables)
    open_park = {
        str(q["unit_id"])
        for q in tables.questions
        if q["status"] == "open" and q["asked_by"] == "work-ledger"
    }
    waived_edges = {
        (str(e["unit_id"]), str(e["prerequisite_id"]))
        for e in tables.requirements
        if e["waived_at"] is not None
    }
    finished_by_events = {str(e["unit_id"]) for e in tables.events if finishes(e)}
    waived_by_events = {
        (str(e["unit_id"]), e["detail"]["prerequisite_id"])
        for e in tables.events
        if e["event_type"] == "waived"
    }
    for unit, events in _unit_events(tables).items():
        states = [e for e in events if e["to_state"] is not None]
        last_state = states[-1]["to_state"] if states else None
        row = by_id.get(unit)
        if row is None or last_state != row["state"]:
            report.violations.append(
                f"unit {unit}'s events end {last_state}, its row says otherwise"
            )
        if last_state != "waiting":
            continue
        entered = next(e for e in reversed(states) if e["to_state"] == "waiting")
        holding = [
            p
            for p in required[unit]
            if p not in finished_by_events and (unit, p) not in waived_by_events
        ]
        if not holding and not parks(entered):
            report.violations.append(
                f"unit {unit} is stranded waiting (events): every prerequisite finished or waived"
            )
    for unit, row in by_id.items():
        if row["state"] != "waiting":
            continue
        holding = [
            p
            for p in required[unit]
            if (unit, p) not in waived_edges
            and not (by_id[p]["state"] == "done" or by_id[p]["disposition"] == "DROPPED")
        ]
        if not holding and unit not in open_park:
            report.violations.append(
                f"unit {row['external_ref']} is stranded waiting (tables): nothing holds it"
            )


def check_allowance(report: ShapeReport, tables: Tables, ops: list[Op]) -> None:
    outcome = {str(a["id"]): a["outcome"] for a in tables.attempts}
    by_id = {str(u["id"]): u for u in tables.units}
    sent_max = _registered_max_attempts(ops)
    for unit, events in _unit_events(tables).items():
        row = by_id[unit]
        limit = row["max_attempts"]
        ref = row["external_ref"]
        if ref in sent_max and sent_max[ref] != limit:
            report.violations.append(
                f"unit {ref} registered with max_attempts {sent_max[ref]}, has {limit}"
            )
        if row["parent_id"] is not None and limit != by_id[str(row["parent_id"])]["max_attempts"]:
            report.violations.append(
                f"split child {ref} does not inherit its parent's max_attempts"
            )
        failed, allowed, claims = 0, limit, 0
        for e in events:
            kind, ended = e["event_type"], None
            if kind == "released":
                ended = str(e["attempt_id"])
            elif kind == "stale_reclaimed":
                ended = e["detail"].get("superseded_attempt_id")
            elif (
                kind == "disposed"
                and e["detail"].get("ended_attempt")
                and e["from_state"] != "blocked"
            ):
                ended = str(e["attempt_id"])
            if ended is not None and outcome.get(ended) in FAILED:
                failed += 1
                if failed >= allowed and kind != "disposed" and e["to_state"] != "waiting":
                    report.violations.append(
                        f"event {e['id']}: unit {ref} reached its allowance ({failed} of "
                        f"{allowed}) and was not parked"
                    )
            if failed > allowed:
                report.violations.append(
                    f"event {e['id']}: unit {ref} failed {failed} attempts, allowance {allowed}"
                )
            if kind == "unblocked" and e["from_state"] == "waiting":
                allowed = failed + limit
                if e["detail"].get("attempts_allowed") != allowed:
                    report.violations.append(
                        f"event {e['id']}: unit {ref}'s answer allows "
                        f"{e['detail'].get('attempts_allowed')}, not {allowed}"
                    )
            if is_claim(e):
                claims += 1
                if failed >= allowed:
                    report.violations.append(
                        f"claim event {e['id']} started attempt {claims} of unit {ref} after "
                        f"{failed} failed attempts, allowance {allowed}"
                    )
        if (failed, allowed) != (row["failed_attempts"], row["attempts_allowed"]):
            report.violations.append(
                f"unit {ref}: events count {failed} failed of {allowed} allowed, the row "
                f"{row['failed_attempts']} of {row['attempts_allowed']}"
            )
    # Tables and history alone: failed attempts <= max_attempts x (1 + answers to its questions).
    answered = Counter(
        str(q["unit_id"])
        for q in tables.questions
        if q["asked_by"] == "work-ledger" and q["status"] == "answered"
    )
    answer_writes = Counter(
        op.path.split("/")[2]
        for op in ops
        if op.kind == "unblock" and not (op.status and 400 <= op.status < 500)
    )
    failed_rows = Counter(str(a["unit_id"]) for a in tables.attempts if a["outcome"] in FAILED)
    for unit, n in failed_rows.items():
        grants = min(answered[unit], answer_writes[unit])
        if n > by_id[unit]["max_attempts"] * (1 + grants):
            report.violations.append(
                f"unit {by_id[unit]['external_ref']} failed {n} attempts with max_attempts "
                f"{by_id[unit]['max_attempts']} and {grants} answers"
            )


def _registered_max_attempts(ops: list[Op]) -> dict[str, int]:
    sent: dict[str, int] = {}
    for op in ops:
        if op.kind == "register" and op.acked:
            for unit in op.body["units"]:  # type: ignore[index]
                sent.setdefault(unit["external_ref"], unit.get("max_attempts", 5))
    return sent


def check_registrations(report: ShapeReport, tables: Tables, ops: list[Op]) -> None:
    by_ref = {u["external_ref"]: str(u["id"]) for u in tables.units}
    edges = {(str(e["unit_id"]), str(e["prerequisite_id"])) for e in tables.requirements}
    for op in ops:
        if op.kind != "register":
            continue
        if op.refusal == "unit_prerequisites_counted":
            report.violations.append(f"register #{op.n} was refused unit_prerequisites_counted")
        if not op.acked:
            continue
        for unit in op.body["units"]:  # type: ignore[index]
            uid = by_ref.get(unit["external_ref"])
            if uid is None:
                report.violations.append(
                    f"acknowledged unit {unit['external_ref']} is not registered"
                )
                continue
            for ref in unit.get("requires", []):
                if (uid, by_ref.get(ref)) not in edges:
                    report.violations.append(
                        f"unit {unit['external_ref']} lacks its requirement on {ref}"
                    )
