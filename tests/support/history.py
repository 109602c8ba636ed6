"""The history checker: a recorded workload (workload.py) held against the ledger's tables.

- holding: from the events alone, a unit is held by one agent at a time (a claim only of
  an unheld unit, a stale reclaim only of a held one, naming its holder, superseding its
  attempt, and never before a lease the old holder was acknowledged);
- effects: every write is a group of requests sharing one Idempotency-Key, and each group
  has an *effect signature* (e.g. "attempt A started", "attempt A cost 417 cents"). For each
  signature, with E events in the ledger, A acknowledged groups and D in-doubt groups (no
  response, or a 5xx), A <= E <= A + D: nothing acknowledged is missing or doubled, and no
  refused write left a trace;
- replays: a retry with the same key after a 2xx got the same status and body back;
- costs: events, attempts and units agree, and the acknowledged cents are all there.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from support.workload import UNKNOWN_OUTCOME, Op, Recorder

# Writes whose response carries the lease of the attempt they name (a cost's may not).
LEASING = frozenset({"claim", "claim_named", "heartbeat", "start", "unblock"})
HOLDER_WRITES = frozenset({"transitioned", "released", "blocked", "heartbeat", "disposed", "split"})
# The shaped workload's operator (shaped_workload.py): it disposes units it does not hold,
# waiting ones, or one a holder took meanwhile (an operator may dispose any unit).
OPERATOR = "op"
# Writes that leave no event of their own: their effects are checked by shape_history.py.
UNEVENTFUL = frozenset({"register", "budget", "control", "read"})


@dataclass
class Report:
    operations: int = 0
    writes: int = 0
    acked: int = 0
    refused: int = 0
    in_doubt: int = 0
    duplicates_replayed: int = 0
    no_answer: int = 0  # requests that got no HTTP answer at all (timeouts, refused, reset)
    timeouts: int = 0
    events: int = 0
    units: int = 0
    reclaims: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        refusals = ", ".join(f"{k} {v}" for k, v in self.refusals.most_common()) or "none"
        return (
            f"operations: {self.operations} HTTP requests ({self.writes} writes: {self.acked} "
            f"acknowledged, {self.refused} refused, {self.in_doubt} in doubt; "
            f"{self.duplicates_replayed} same-key retries replayed; {self.no_answer} requests "
            f"got no answer, {self.timeouts} of them client timeouts)\n"
            f"ledger: {self.units} units, {self.events} events, {self.reclaims} stale reclaims\n"
            f"refusals by invariant: {refusals}\n"
            f"violations: {len(self.violations)}"
            + "".join(f"\n  - {v}" for v in self.violations[:50])
        )


@dataclass
class Group:
    """The requests of one logical write (one Idempotency-Key)."""

    ops: list[Op]
    resumed: bool = False  # an acknowledged claim that handed back a claim already held

    @property
    def first(self) -> Op:
        return self.ops[0]

    @property
    def acked(self) -> Op | None:
        return next((op for op in self.ops if op.acked), None)

    @property
    def in_doubt(self) -> bool:
        return self.acked is None and any(
            op.in_doubt or op.refusal in UNKNOWN_OUTCOME for op in self.ops
        )


def _groups(ops: list[Op]) -> list[Group]:
    by_first: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if op.method == "POST":
            by_first[op.first].append(op)
    groups = [Group(sorted(g, key=lambda o: o.n)) for _, g in sorted(by_first.items())]
    # A named claim's response carries no `resumed` flag: it resumed if it handed back an
    # attempt some earlier response had already named.
    named_before: set[str] = set()
    for group in sorted(groups, key=lambda g: g.acked.n if g.acked else g.first.n):
        acked = group.acked
        if acked is None or not isinstance(acked.response, dict):
            continue
        attempt = (acked.response.get("attempt") or {}).get("id")
        if group.first.kind in ("claim", "claim_named"):
            group.resumed = bool(acked.response.get("resumed")) or attempt in named_before
        if attempt is not None:
            named_before.add(attempt)
    return groups


def _signature(group: Group) -> tuple[Any, ...] | None:
    """What the write, if it took effect, appended to the event log."""
    op, acked = group.first, group.acked
    body = op.body or {}
    kind = op.kind
    if kind in UNEVENTFUL:
        return None
    if kind in ("claim", "claim_named"):
        if acked is not None and acked.response["unit"] is None:
            return None  # an empty queue writes nothing
        if group.resumed:
            return ("resumed", op.agent)  # may write a heartbeat: asking again is a sign of life
        return ("claim", op.agent)
    attempt = body.get("attempt_id") or op.path.split("/")[2]
    if kind == "cost":
        return ("cost_recorded", attempt, body["cost_cents"])
    if kind == "heartbeat":
        return ("heartbeat", attempt)
    if kind in ("start", "verify"):
        return ("transitioned", attempt, body["to"])
    if kind == "release":
        return ("released", attempt)
    if kind == "block":
        return ("blocked", attempt)
    if kind == "unblock":
        return ("unblocked", body["question_id"])
    if kind == "dispose":
        return ("disposed", attempt)
    if kind == "dispose_unit":  # an operator's disposal of a unit nobody holds
        return ("disposed_unit", op.path.split("/")[2])
    if kind == "split":
        return ("split", attempt)
    if kind == "waive":
        return ("waived", op.path.split("/")[2], body["prerequisite"])
    raise AssertionError(f"no signature for {kind}")


def _event_signature(event: asyncpg.Record) -> tuple[Any, ...] | None:
    kind, attempt = event["event_type"], str(event["attempt_id"])
    if kind == "stale_reclaimed" and event["to_state"] == "waiting":
        return None  # a claim parked a lapsed unit at its limit, then went on (or found none)
    if kind in ("claimed", "stale_reclaimed"):
        return ("claim", event["agent_id"])
    if kind == "transitioned" and event["attempt_id"] is None:
        return None  # waiting → ready as its last prerequisite finished, in that write
    if kind == "disposed" and event["agent_id"] == OPERATOR:
        return ("disposed_unit", str(event["unit_id"]))
    if kind == "split":
        return ("split", attempt)
    if kind == "waived":
        return ("waived", str(event["unit_id"]), event["detail"]["prerequisite_id"])
    if kind == "cost_recorded":
        return ("cost_recorded", attempt, event["cost_delta_cents"])
    if kind == "transitioned":
        return ("transitioned", attempt, event["to_state"])
    if kind == "unblocked":
        return ("unblocked", event["detail"]["question_id"])
    if kind == "heartbeat" and event["detail"].get("resumed"):
        return ("resumed", event["agent_id"])
    if kind in ("heartbeat", "released", "blocked", "disposed"):
        return (kind, attempt)
    return None  # registered


async def check(conn: asyncpg.Connection, recorder: Recorder) -> Report:
    """Hold the recorded history against the ledger's tables."""
    ops = recorder.ops
    groups = _groups(ops)
    events = await conn.fetch("SELECT * FROM work_unit_events ORDER BY id")
    attempts = {str(a["id"]): a for a in await conn.fetch("SELECT * FROM work_unit_attempts")}
    units = await conn.fetch("SELECT * FROM work_units")
    report = Report(operations=len(ops), writes=len(groups), events=len(events), units=len(units))
    report.no_answer = sum(1 for op in ops if op.status is None)
    report.timeouts = sum(1 for op in ops if op.error and "Timeout" in op.error.split(":")[0])
    for group in groups:
        if group.acked is not None:
            report.acked += 1
        elif group.in_doubt:
            report.in_doubt += 1
        else:
            report.refused += 1
            report.refusals[group.ops[-1].refusal] += 1
    _check_effects(report, groups, events)
    _check_claims(report, groups, attempts, events)
    _check_holding(report, events, attempts, _acked_leases(ops))
    _check_replays(report, groups)
    _check_costs(report, groups, events, attempts, units)
    _check_units(report, groups, units)
    return report


def _check_units(report: Report, groups: list[Group], units: list[asyncpg.Record]) -> None:
    """The unit rows show every acknowledged disposal and verification."""
    by_id = {str(u["id"]): u for u in units}
    for group in groups:
        acked, body = group.acked, group.first.body or {}
        if acked is None or group.first.kind not in ("dispose", "verify"):
            continue
        unit = by_id.get(group.first.path.split("/")[2])
        if unit is None:
            report.violations.append(f"acknowledged {group.first.kind} of an unknown unit")
        elif group.first.kind == "dispose" and unit["disposition"] != body["disposition"]:
            report.violations.append(
                f"unit {unit['external_ref']} was acknowledged {body['disposition']} "
                f"but is {unit['disposition']}"
            )
        elif group.first.kind == "verify" and (
            unit["state"] not in ("verified", "done")
            or body["evidence_url"] not in unit["evidence_urls"]
        ):
            report.violations.append(
                f"unit {unit['external_ref']} was acknowledged verified but is {unit['state']}"
            )


def _check_effects(report: Report, groups: list[Group], events: list[asyncpg.Record]) -> None:
    acked: Counter[tuple[Any, ...]] = Counter()
    doubt: Counter[tuple[Any, ...]] = Counter()
    seen: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for group in groups:
        signature = _signature(group)
        if signature is None:
            continue
        seen[signature].append(_described(group))
        if group.acked is not None:
            acked[signature] += 1
        elif group.in_doubt:
            doubt[signature] += 1
            if signature[0] == "claim":  # a claim in doubt may have been a resumed one
                doubt[("resumed", *signature[1:])] += 1
    written = Counter(s for s in map(_event_signature, events) if s is not None)
    for signature in set(acked) | set(doubt) | set(written):
        a, d, e = acked[signature], doubt[signature], written[signature]
        if e < a and signature[0] != "resumed":  # whether resuming writes an event is a detail
            report.violations.append(
                f"acknowledged but not in the ledger: {signature} ({a} > {e}); "
                f"requests: {seen[signature]}"
            )
        elif e > a + d:
            report.violations.append(
                f"in the ledger without an acknowledged or in-doubt write: {signature} "
                f"({e} events, {a} acknowledged, {d} in doubt); requests: {seen[signature]}"
            )


def _described(group: Group) -> str:
    """A group's requests in brief: op number, status, replayed, and what a claim returned."""
    parts = []
    for op in group.ops:
        part = f"#{op.n} {op.status}{' replayed' if op.replayed else ''}"
        response = op.response if isinstance(op.response, dict) else {}
        if response.get("attempt"):
            part += f" attempt {response['attempt']['id'][:8]} resumed={response.get('resumed')}"
        parts.append(part)
    return f"[{group.first.kind} {', '.join(parts)}]"


def _check_claims(
    report: Report, groups: list[Group], attempts: dict[str, Any], events: list[asyncpg.Record]
) -> None:
    """Every acknowledged claim names an attempt of that agent, and its claim event."""
    claim_events = {
        str(e["attempt_id"]): e for e in events if e["event_type"] in ("claimed", "stale_reclaimed")
    }
    for group in groups:
        acked = group.acked
        if acked is None or group.first.kind not in ("claim", "claim_named"):
            continue
        claimed = acked.response.get("attempt")
        if claimed is None:
            continue
        row = attempts.get(claimed["id"])
        if (
            row is None
            or row["agent_id"] != acked.agent
            or str(row["unit_id"]) != claimed["unit_id"]
        ):
            report.violations.append(f"acknowledged claim {claimed['id']} has no matching attempt")
        elif claimed["id"] not in claim_events:
            report.violations.append(
                f"acknowledged claim {claimed['id']} (resumed={acked.response['resumed']}, "
                f"op {acked.n} of {[(o.n, o.status, o.replayed) for o in group.ops]}) has no event"
            )


def _acked_leases(ops: list[Op]) -> dict[str, dt.datetime]:
    """The lease expiry each attempt's holder was told last, per attempt. The last, not the
    furthest: a heartbeat sets the lease to now + its lease_seconds, which may end sooner
    than a longer lease granted before (a claim's or a heartbeat's lease_seconds 5, then
    the agent's usual 3). An attempt's leasing writes come from its one holder, one at a
    time, so the last answered is the last applied."""
    leases: dict[str, dt.datetime] = {}
    for op in sorted(ops, key=lambda o: o.ended):
        if op.kind not in LEASING or not op.acked or not isinstance(op.response, dict):
            continue
        unit = op.response.get("unit")
        attempt = op.response.get("attempt") or op.response.get("question")
        if not unit or not attempt or not unit.get("lease_expires_at"):
            continue
        attempt_id = attempt["id"] if "attempt_no" in attempt else attempt["attempt_id"]
        leases[attempt_id] = dt.datetime.fromisoformat(unit["lease_expires_at"])
    return leases


def _check_holding(
    report: Report,
    events: list[asyncpg.Record],
    attempts: dict[str, Any],
    leases: dict[str, dt.datetime],
) -> None:
    """From the events alone: one holder at a time, and reclaims only of lapsed leases."""
    holder: dict[Any, str | None] = defaultdict(lambda: None)
    for event in events:
        unit, kind, agent = event["unit_id"], event["event_type"], event["agent_id"]
        where = f"event {event['id']} ({kind}) of unit {unit}"
        if kind == "claimed":
            if holder[unit] is not None:
                report.violations.append(
                    f"{where}: claimed by {agent} while {holder[unit]} held it"
                )
            holder[unit] = agent
        elif kind == "stale_reclaimed":
            report.reclaims += 1
            previous, old = (
                event["detail"].get("previous_agent"),
                event["detail"].get("superseded_attempt_id"),
            )
            if holder[unit] is None or previous != holder[unit]:
                report.violations.append(
                    f"{where}: reclaimed from {previous}, held by {holder[unit]}"
                )
            if old is None or attempts[old]["outcome"] != "superseded":
                report.violations.append(f"{where}: the old attempt {old} was not superseded")
            elif old in leases and event["created_at"] < leases[old]:
                report.violations.append(
                    f"{where}: reclaimed at {event['created_at']}, before the lease its holder "
                    f"was acknowledged until {leases[old]}"
                )
            # Parked at its attempt limit instead: nobody holds it.
            holder[unit] = agent if event["to_state"] == "claimed" else None
            continue
        if (
            kind in HOLDER_WRITES
            and holder[unit] is not None
            and agent not in (holder[unit], OPERATOR)
        ):
            report.violations.append(f"{where}: written by {agent} while {holder[unit]} held it")
        if kind in ("released", "disposed", "split") or (
            kind == "transitioned" and event["to_state"] == "verified"
        ):
            holder[unit] = None


def _check_replays(report: Report, groups: list[Group]) -> None:
    for group in groups:
        acked = group.acked
        if acked is None:
            continue
        for op in group.ops:
            if op.n <= acked.n or op.in_doubt:  # e.g. a 503 while the database was down
                continue
            if op.replayed and op.status == acked.status and op.response == acked.response:
                report.duplicates_replayed += 1
            else:
                report.violations.append(
                    f"a same-key retry of {acked.kind} {acked.path} got {op.status} "
                    f"(replayed={op.replayed}), not the first outcome {acked.status}"
                )


def _check_costs(
    report: Report,
    groups: list[Group],
    events: list[asyncpg.Record],
    attempts: dict[str, Any],
    units: list[asyncpg.Record],
) -> None:
    by_attempt: Counter[str] = Counter()
    for event in events:
        if event["event_type"] == "cost_recorded":
            by_attempt[str(event["attempt_id"])] += event["cost_delta_cents"]
    for attempt_id, row in attempts.items():
        if row["cost_cents"] != by_attempt[attempt_id]:
            report.violations.append(
                f"attempt {attempt_id} costs {row['cost_cents']}, "
                f"its cost events add up to {by_attempt[attempt_id]}"
            )
    per_unit: Counter[str] = Counter()
    for row in attempts.values():
        per_unit[str(row["unit_id"])] += row["cost_cents"]
    for unit in units:
        if unit["cost_cents"] != per_unit[str(unit["id"])]:
            report.violations.append(
                f"unit {unit['external_ref']} cost disagrees with its attempts"
            )
    costs = [g for g in groups if g.first.kind == "cost"]
    acked = sum(g.first.body["cost_cents"] for g in costs if g.acked)  # type: ignore[index]
    doubt = sum(g.first.body["cost_cents"] for g in costs if g.in_doubt)  # type: ignore[index]
    total = sum(u["cost_cents"] for u in units)
    if not acked <= total <= acked + doubt:
        report.violations.append(
            f"ledger cost {total} is not between the acknowledged {acked} and {acked + doubt}"
        )
