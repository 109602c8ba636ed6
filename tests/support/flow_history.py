"""The flow checker: caps, exclusion keys and pauses held against the ledger's history.

The workload's `Snapshots` sampled `pg_current_snapshot()` every few milliseconds. Every
event and control event row is noted with the top-level transaction that wrote it
(`note_top_transactions`), so the committed state of the ledger at each sample is exactly
the rows that sample sees. Not `xmin`: a row written in a savepoint (a keyed claim that
lost a race runs its statements in savepoints) carries its subtransaction's id, which no
snapshot lists as in progress, so it would look committed before its transaction was. The
checker replays those states in order (each sample's newly visible rows in id order: one
unit's events, and one scope's admissions and control changes, commit in id order because
each takes its row lock before it draws its id) and checks:

- **caps**: after each admission (a `claimed` event of a unit that had no holder), the
  units of each scope over it that are live by admission are at most the highest cap that
  could be in force (the scope's cap at the previous sample and any cap committed since).
  Units made live again without an admission (unblocked) are not counted: the contract
  lets them pass a cap.
- **keys**: in every sampled state, no exclusion key has two holders.
- **pauses**: no claim (`claimed`, or a `stale_reclaimed` to claimed) of a scope that was
  paused at the previous sample commits unless a resume of that scope committed since;
  from the requests too: no acknowledged new claim sent after a pause was acknowledged
  and answered before any resume was sent.
- **none stranded**: a pull-next that answered "nothing to claim" while some ready unit
  stayed claimable from the sample before it was sent to the sample after its answer (its
  scopes unpaused and below their caps in each window between two samples, counting the
  units live at its start and every unit that went live in it, its keys free and taken by
  nobody meanwhile, nothing else happening to it, and no
  transaction in flight at the later sample about to change it: that one held its row
  lock, which pull-next rightly skips) is a violation.
- **refusals**: a `cap_reached` names live >= max_live; a `paused` names a scope.

Rows are plain mappings, so a test can doctor them and see each rule fail.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from support.flow_workload import Sample
from support.workload import Op

Row = Mapping[str, Any]
Scope = tuple[str, str | None]
HELD = frozenset({"claimed", "in_progress", "blocked"})
LIVE = frozenset({"claimed", "in_progress"})
EVERYTHING = Sample(math.inf, math.inf, 2**62, 2**62, frozenset())


@dataclass
class FlowRows:
    events: list[Row]  # id, unit_id, event_type, from_state, to_state, xid
    units: list[Row]  # id, external_ref, fleet, domain, exclusive
    controls: list[Row]  # control_events: id, fleet, domain, after, xid


# Test instrumentation in the test's own database: a row's top-level transaction, as
# pg_current_xact_id() names it inside a savepoint too.
_NOTE_TOP_TRANSACTIONS = """
CREATE TABLE flow_top_transactions (
    tab text NOT NULL, id bigint NOT NULL, top xid8 NOT NULL, PRIMARY KEY (tab, id)
);
CREATE FUNCTION flow_note_top_transaction() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
    INSERT INTO flow_top_transactions VALUES (TG_TABLE_NAME, NEW.id, pg_current_xact_id());
    RETURN NULL;
END $$;
CREATE TRIGGER flow_note_top_transaction AFTER INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION flow_note_top_transaction();
CREATE TRIGGER flow_note_top_transaction AFTER INSERT ON control_events
    FOR EACH ROW EXECUTE FUNCTION flow_note_top_transaction();
"""
_TOP = (
    " (SELECT t.top::text::bigint FROM flow_top_transactions AS t"
    " WHERE t.tab = '{tab}' AND t.id = r.id) AS xid"
)


async def note_top_transactions(conn: asyncpg.Connection) -> None:
    """From now on, note each event and control event row's top-level transaction."""
    await conn.execute(_NOTE_TOP_TRANSACTIONS)


async def load_flow(conn: asyncpg.Connection) -> FlowRows:
    """The ledger's rows, each event and control event with its top-level transaction
    (all written after `note_top_transactions`)."""

    def rows(records: list[asyncpg.Record]) -> list[Row]:
        found: list[Row] = [dict(r) for r in records]
        assert all(r.get("xid", 0) is not None for r in found), "a row without its transaction"
        return found

    return FlowRows(
        rows(
            await conn.fetch(
                "SELECT r.id, r.unit_id, r.event_type::text, r.from_state::text,"
                " r.to_state::text,"
                + _TOP.format(tab="work_unit_events")
                + " FROM work_unit_events AS r ORDER BY r.id"
            )
        ),
        rows(await conn.fetch("SELECT id, external_ref, fleet, domain, exclusive FROM work_units")),
        rows(
            await conn.fetch(
                "SELECT r.id, r.fleet, r.domain, r.after::text AS after,"
                + _TOP.format(tab="control_events")
                + " FROM control_events AS r ORDER BY r.id"
            )
        ),
    )


@dataclass
class FlowReport:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"flow: {counts}\nflow violations: {len(self.violations)}" + "".join(
            f"\n  - {v}" for v in self.violations[:50]
        )


@dataclass
class _Probe:
    op: Op
    last: int  # the index of the first sample after its answer
    candidates: set[Any]


class _Replay:
    """The ledger's committed state, sample after sample."""

    def __init__(self, rows: FlowRows, report: FlowReport) -> None:
        self.report = report
        self.unit = {u["id"]: u for u in rows.units}
        self.state: dict[Any, str] = {}
        self.admitted: set[Any] = set()  # live units that got there by an admission
        self.ready: set[Any] = set()
        self.live_count: Counter[Scope] = Counter()
        self.controls: dict[Scope, dict[str, Any]] = {}
        self.holders: dict[str, set[Any]] = defaultdict(set)
        pending = [("e", r) for r in rows.events] + [
            ("c", {**r, "after": control_after(r["after"])}) for r in rows.controls
        ]
        pending.sort(key=lambda p: p[1]["xid"])
        self.pending = pending
        self.next = 0
        self.in_flight: list[tuple[str, Row]] = []

    def scopes(self, unit: Any) -> tuple[Scope, Scope]:
        u = self.unit[unit]
        return (u["fleet"], None), (u["fleet"], u["domain"])

    def keys(self, unit: Any) -> list[str]:
        return list(self.unit[unit]["exclusive"] or [])

    def count(self, scope: Scope, units: Iterable[Any]) -> int:
        return sum(1 for u in units if scope in self.scopes(u))

    def live(self, scope: Scope) -> int:
        return self.live_count[scope]

    def cap(self, scope: Scope) -> float:
        found = self.controls.get(scope, {}).get("max_live")
        return math.inf if found is None else found

    def paused(self, scope: Scope) -> bool:
        return bool(self.controls.get(scope, {}).get("paused"))

    def newly_visible(self, sample: Sample) -> tuple[list[Row], list[Row]]:
        seen, still = [], []
        for item in self.in_flight:
            (seen if sample.sees(item[1]["xid"]) else still).append(item)
        while self.next < len(self.pending) and self.pending[self.next][1]["xid"] < sample.xmax:
            item = self.pending[self.next]
            (seen if sample.sees(item[1]["xid"]) else still).append(item)
            self.next += 1
        self.in_flight = still
        events = sorted((r for k, r in seen if k == "e"), key=lambda r: r["id"])
        controls = sorted((r for k, r in seen if k == "c"), key=lambda r: r["id"])
        return events, controls

    def changing(self) -> set[Any]:
        """The units that transactions in flight at the last sample went on to change."""
        return {r["unit_id"] for k, r in self.in_flight if k == "e"}

    def claimable(self, unit: Any) -> bool:
        if self.state.get(unit) != "ready":
            return False
        for scope in self.scopes(unit):
            if self.paused(scope) or self.live(scope) >= self.cap(scope):
                return False
        return not any(self.holders[k] - {unit} for k in self.keys(unit))


@dataclass
class _Window:
    """What committed between two samples."""

    units: set[Any] = field(default_factory=set)
    keys_taken: set[str] = field(default_factory=set)
    live_before: Counter[Scope] = field(default_factory=Counter)  # at the sample before
    went_live: Counter[Scope] = field(default_factory=Counter)
    controlled: set[Scope] = field(default_factory=set)


def check_flow(rows: FlowRows, samples: list[Sample], ops: list[Op]) -> FlowReport:
    report = FlowReport()
    replay = _Replay(rows, report)
    probes = _probes(samples, ops)
    opening: dict[int, list[_Probe]] = defaultdict(list)
    for probe, first in probes:
        opening[first].append(probe)
    open_probes: list[_Probe] = []
    for i, sample in enumerate([*samples, EVERYTHING]):
        window = _apply(replay, *replay.newly_visible(sample))
        for key, units in replay.holders.items():
            if len(units) > 1:
                refs = sorted(replay.unit[u]["external_ref"] for u in units)
                report.violations.append(f"key {key!r} held by {refs} at sample {i}")
        still_open = []
        for probe in open_probes:
            probe.candidates = {u for u in probe.candidates if _stayed(replay, window, u)}
            if not probe.candidates:
                continue
            if i < probe.last:
                still_open.append(probe)
                continue
            # A claim of the unit in flight at the last sample held its row lock, which
            # pull-next skips: only units no transaction was changing count as stranded.
            probe.candidates -= replay.changing()
            if not probe.candidates:
                report.counts["empty answers excused by a claim in flight"] += 1
                continue
            refs = sorted(replay.unit[u]["external_ref"] for u in probe.candidates)[:3]
            report.violations.append(
                f"pull-next #{probe.op.n} by {probe.op.agent} answered nothing while "
                f"{len(probe.candidates)} units stayed claimable, e.g. {refs}"
            )
        report.counts["pull-next answers of nothing checked"] += len(opening.get(i, []))
        for probe in opening.get(i, []):
            probe.candidates = {u for u in replay.ready if replay.claimable(u)}
            if probe.candidates:
                report.counts["empty answers with a unit claimable at the sample before"] += 1
                still_open.append(probe)
        open_probes = still_open
    report.counts["samples"] = len(samples)
    _check_requests(report, ops)
    return report


def control_after(text: str) -> dict[str, Any]:
    """A control event's `after`: migration 0022's writes stored it as a JSON string
    holding the object (the pool's codec encoded the service's json.dumps again)."""
    import json

    found = json.loads(text)
    return json.loads(found) if isinstance(found, str) else found


def _apply(replay: _Replay, events: list[Row], controls: list[Row]) -> _Window:
    window = _Window(live_before=Counter(replay.live_count))
    before = {scope: dict(c) for scope, c in replay.controls.items()}
    window_caps: dict[Scope, list[float]] = defaultdict(list)
    resumed: set[Scope] = set()
    for c in controls:
        scope = (c["fleet"], c["domain"])
        replay.controls[scope] = c["after"]
        window.controlled.add(scope)
        cap = c["after"].get("max_live")
        window_caps[scope].append(math.inf if cap is None else cap)
        if not c["after"].get("paused"):
            resumed.add(scope)
    for e in events:
        unit, was = e["unit_id"], replay.state.get(e["unit_id"])
        to = e["to_state"] or was
        window.units.add(unit)
        if e["event_type"] == "claimed" or (
            e["event_type"] == "stale_reclaimed" and to == "claimed"
        ):
            _check_pause(replay, e, before, resumed)
        if to in LIVE and was not in LIVE:
            for scope in replay.scopes(unit):
                window.went_live[scope] += 1
                replay.live_count[scope] += 1
        elif was in LIVE and to not in LIVE:
            for scope in replay.scopes(unit):
                replay.live_count[scope] -= 1
        (replay.ready.add if to == "ready" else replay.ready.discard)(unit)
        if to in HELD and was not in HELD:
            for key in replay.keys(unit):
                replay.holders[key].add(unit)
                window.keys_taken.add(key)
        elif to not in HELD and was in HELD:
            for key in replay.keys(unit):
                replay.holders[key].discard(unit)
        if to not in LIVE:
            replay.admitted.discard(unit)
        replay.state[unit] = to
        if e["event_type"] == "claimed" and was not in HELD:
            replay.admitted.add(unit)
            replay.report.counts["admissions checked"] += 1
            _check_cap(replay, unit, e, before, window_caps)
        elif e["event_type"] == "stale_reclaimed":
            replay.report.counts["stale reclaims"] += 1
    return window


def _check_pause(
    replay: _Replay, e: Row, before: dict[Scope, dict[str, Any]], resumed: set[Scope]
) -> None:
    for scope in replay.scopes(e["unit_id"]):
        if before.get(scope, {}).get("paused") and scope not in resumed:
            replay.report.violations.append(
                f"{e['event_type']} event {e['id']} of {replay.unit[e['unit_id']]['external_ref']}"
                f" committed after the pause of {scope} had committed"
            )


def _check_cap(
    replay: _Replay,
    unit: Any,
    e: Row,
    before: dict[Scope, dict[str, Any]],
    window_caps: dict[Scope, list[float]],
) -> None:
    for scope in replay.scopes(unit):
        caps = list(window_caps.get(scope, []))
        if scope in before:
            prior = before[scope].get("max_live")
            caps.append(math.inf if prior is None else prior)
        if not caps:
            continue
        live = replay.count(scope, replay.admitted)
        if live > max(caps):
            replay.report.violations.append(
                f"claimed event {e['id']} of {replay.unit[unit]['external_ref']} took {scope} "
                f"to {live} live units past its cap of {max(caps)}"
            )


def _stayed(replay: _Replay, window: _Window, unit: Any) -> bool:
    """Whether `unit` was claimable all through the window that just committed."""
    if unit in window.units or not replay.claimable(unit):
        return False
    if any(k in window.keys_taken for k in replay.keys(unit)):
        return False
    for scope in replay.scopes(unit):
        if scope in window.controlled:
            return False
        # Every unit that went live meanwhile may have been live at once, before any
        # that left, beside those live at the sample before: claimable throughout only
        # with room for all of them (not the count at the window's end: two leaving after
        # one came in hide that the scope was at its cap between).
        if window.live_before[scope] + window.went_live[scope] >= replay.cap(scope):
            return False
    return True


def _probes(samples: list[Sample], ops: list[Op]) -> list[tuple[_Probe, int]]:
    """Each pull-next answered "nothing", with the last sample before it was sent."""
    afters = [s.after for s in samples]
    befores = [s.before for s in samples]
    found = []
    for op in ops:
        if op.kind != "claim" or not op.acked or op.replayed or op.n != op.first:
            continue
        if op.response.get("unit") is not None:
            continue
        first = bisect.bisect_right(afters, op.started) - 1
        last = bisect.bisect_left(befores, op.ended)
        if first >= 0 and last < len(samples):
            found.append((_Probe(op, last, set()), first))
    return found


def _check_requests(report: FlowReport, ops: list[Op]) -> None:
    """Pauses and refusals, from the requests alone."""
    by_n = {op.n: op for op in ops}
    controls = [op for op in ops if op.kind == "control" and "paused" in (op.body or {})]
    seen_attempts: set[str] = set()
    for op in sorted(ops, key=lambda o: o.ended):
        if op.status == 409 and op.kind.startswith("claim"):
            report.counts[f"claims refused {op.refusal}"] += 1
        if op.status == 409 and op.refusal in ("cap_reached", "scope_cap_reached"):
            body = op.response
            if body.get("live", 0) < (body.get("max_live") or 0):
                report.violations.append(f"#{op.n} refused cap_reached with {body}")
        if not op.kind.startswith("claim") or not op.acked:
            continue
        unit, attempt = op.response.get("unit"), op.response.get("attempt")
        if unit is None or attempt is None or op.response.get("resumed"):
            continue
        if attempt["id"] in seen_attempts:
            continue  # the same claim, handed back
        seen_attempts.add(attempt["id"])
        sent = by_n.get(op.first, op).started
        for scope in ((unit["fleet"], None), (unit["fleet"], unit["domain"])):
            _paused_when_sent(report, op, scope, sent, controls)


def _paused_when_sent(
    report: FlowReport, op: Op, scope: Scope, sent: float, controls: list[Op]
) -> None:
    mine = [c for c in controls if (c.body["fleet"], c.body.get("domain")) == scope]  # type: ignore[index]
    settled = [c for c in mine if c.acked and c.ended < sent]
    if not settled or not max(settled, key=lambda c: c.ended).body["paused"]:  # type: ignore[index]
        return
    pause = max(settled, key=lambda c: c.ended)
    if any(
        not c.body["paused"] and c.started > pause.started and c.started < op.ended for c in mine
    ):  # type: ignore[index]
        return
    report.violations.append(
        f"claim #{op.n} of {op.response['unit']['external_ref']} sent {sent:.3f}, acked "
        f"{op.ended:.3f}, after the pause of {scope} was acknowledged at {pause.ended:.3f}"
    )
