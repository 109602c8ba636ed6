"""The money half of the shape-and-money checker (see shape_history.py): budgets decided
by the claim, and cost records that add up."""

from __future__ import annotations

from collections import Counter, defaultdict

from support.shape_rows import TOKENS, ShapeReport, Tables, acked_claims, claim_event_id
from support.workload import Op


def check_budgets(report: ShapeReport, tables: Tables, ops: list[Op]) -> None:
    units = {str(u["id"]): u for u in tables.units}
    unit_of_attempt = {str(a["id"]): str(a["unit_id"]) for a in tables.attempts}
    # The cost events each acknowledged cost write made: (ack time, event id, unit, cents).
    cost_events = {
        (str(e["attempt_id"]), e["cost_delta_cents"]): e["id"]
        for e in tables.events
        if e["event_type"] == "cost_recorded"
    }
    acked_costs = []
    for op in ops:
        if op.kind == "cost" and op.acked:
            attempt = op.path.split("/")[2]
            event = cost_events.get((attempt, op.body["cost_cents"]))  # type: ignore[index]
            if event is not None and attempt in unit_of_attempt:
                acked_costs.append(
                    (op.ended, event, units[unit_of_attempt[attempt]], op.body["cost_cents"])
                )  # type: ignore[index]
    # One entry per cost event, at its first acknowledgement (a same-key replay is the
    # same record, acknowledged again).
    first_ack: dict[int, tuple[float, int, str, int]] = {}
    for t, e, u, cents in acked_costs:
        if e not in first_ack or t < first_ack[e][0]:
            first_ack[e] = (t, e, str(u["id"]), cents)
    acked_costs = sorted(first_ack.values())
    cap_writes = [op for op in ops if op.kind == "budget"]
    by_scope: dict[tuple[str, str | None], list[Op]] = defaultdict(list)
    for op in cap_writes:
        by_scope[(op.body["fleet"], op.body.get("domain"))].append(op)  # type: ignore[index]
    for first, acked in acked_claims(ops):
        unit = units.get(acked.response["unit"]["id"])
        if unit is None:
            continue
        claim_event = claim_event_id(tables, acked)
        for scope in ((unit["fleet"], None), (unit["fleet"], unit["domain"])):
            cap = _lenient_cap(by_scope[scope], first.started, acked.ended)
            if cap is None:
                continue
            counted = [
                (event, cents)
                for t, event, uid, cents in acked_costs
                if t < first.started
                and units[uid]["fleet"] == scope[0]
                and (scope[1] is None or units[uid]["domain"] == scope[1])
            ]
            spent = sum(cents for _, cents in counted)
            if spent >= cap:
                kind = next(
                    (e["event_type"] for e in tables.events if e["id"] == claim_event), None
                )
                report.violations.append(
                    f"claim #{acked.n} ({kind} event {claim_event}, by {acked.agent}) of unit "
                    f"{unit['external_ref']} in scope {scope} while {spent} of a {cap} cent "
                    f"cap was spent and acknowledged; sent {first.started:.3f}, acked "
                    f"{acked.ended:.3f}, caps {_cap_story(by_scope[scope])}"
                )
            late = [event for event, _ in counted if event > claim_event]
            if late:
                report.violations.append(
                    f"claim event {claim_event} is before cost events {late[:3]} "
                    "acknowledged before the claim was sent"
                )
    for op in ops:
        if op.refusal == "budget_exhausted":
            budget = op.response["budget"]
            if budget["spent_cents"] < budget["cap_cents"]:
                report.violations.append(f"#{op.n} refused budget_exhausted with {budget}")
    kept = Counter((c["fleet"], c["domain"], c["cap_cents"]) for c in tables.caps)
    for scope, writes in by_scope.items():
        for op in writes:
            key = (scope[0], scope[1], op.body["cap_cents"])  # type: ignore[index]
            if op.acked and kept[key] == 0:
                report.violations.append(f"acknowledged cap {key} is not in budget_caps")


def _cap_story(writes: list[Op]) -> list[tuple[int, float, float, int | None]]:
    return [(w.body["cap_cents"], round(w.started, 3), round(w.ended, 3), w.status) for w in writes]  # type: ignore[index]


def _lenient_cap(writes: list[Op], sent: float, acked: float) -> int | None:
    """The highest cap that could be in force while a claim sent at `sent` and acknowledged
    at `acked` ran: the last cap acknowledged before it was sent, and any cap write that was
    in flight meanwhile or never answered. None: no budget yet."""
    settled = [w for w in writes if w.acked and w.ended < sent]
    pending = [
        w
        for w in writes
        if w.started < acked and w not in settled and not (w.status and 400 <= w.status < 500)
    ]
    caps = [w.body["cap_cents"] for w in pending]  # type: ignore[index]
    if settled:
        caps.append(max(settled, key=lambda w: w.ended).body["cap_cents"])  # type: ignore[index]
    return max(caps) if caps else None


def check_costs(report: ShapeReport, tables: Tables, ops: list[Op]) -> None:
    per_attempt: Counter[str] = Counter()
    per_unit: Counter[str] = Counter()
    records = Counter()
    for r in tables.cost_records:
        per_attempt[str(r["attempt_id"])] += r["cost_cents"]
        per_unit[str(r["unit_id"])] += r["cost_cents"]
        records[
            (str(r["attempt_id"]), r["cost_cents"], r["model"], *(r[t] or 0 for t in TOKENS))
        ] += 1
    for a in tables.attempts:
        if a["cost_cents"] != per_attempt[str(a["id"])]:
            report.violations.append(
                f"attempt {a['id']} costs {a['cost_cents']}, "
                f"its records {per_attempt[str(a['id'])]}"
            )
    scope_spent: Counter[tuple[str, str | None]] = Counter()
    for u in tables.units:
        if u["cost_cents"] != per_unit[str(u["id"])]:
            report.violations.append(
                f"unit {u['external_ref']} costs {u['cost_cents']}, "
                f"its records {per_unit[str(u['id'])]}"
            )
        scope_spent[(u["fleet"], None)] += u["cost_cents"]
        scope_spent[(u["fleet"], u["domain"])] += u["cost_cents"]
    for s in tables.spent:
        if s["spent"] != scope_spent[(s["fleet"], s["domain"])]:
            report.violations.append(
                f"budget {s['fleet']}/{s['domain']} spent {s['spent']}, "
                f"its units {scope_spent[(s['fleet'], s['domain'])]}"
            )
    for op in ops:
        if op.kind != "cost" or not op.acked or op.replayed:
            continue
        body = op.body or {}
        key = (
            op.path.split("/")[2],
            body["cost_cents"],
            body.get("model"),
            *(body.get(t, 0) for t in TOKENS),
        )
        if records[key] == 0:
            report.violations.append(f"acknowledged cost record {key} is not in cost_records")
