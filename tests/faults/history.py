"""A randomized workload of concurrent HTTP agents, the history it records, and a checker.

`Workload` drives many agents (each with its own token) and one triage principal against a
running server: claims, starts, heartbeats, costs, blocks and answers, verifies, disposals,
releases, deliberate refusals, deliberate retries with the same Idempotency-Key, random
client timeouts, and agents that die silently and come back as a new sub-agent. Every
request and its response (or its absence) is an `Op` in the `Recorder`.

`check` then reads the ledger's tables and holds the history against them:

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

import asyncio
import datetime as dt
import itertools
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

IN_FLIGHT = "idempotency_key_in_flight"
# Writes whose response carries the lease of the attempt they name (a cost's may not).
LEASING = frozenset({"claim", "claim_named", "heartbeat", "start", "unblock"})
HOLDER_WRITES = frozenset({"transitioned", "released", "blocked", "heartbeat", "disposed"})


@dataclass
class Op:
    """One HTTP request and what came back (status None: no response at all)."""

    n: int
    agent: str
    kind: str
    method: str
    path: str
    body: dict[str, Any] | None
    key: str | None
    first: int
    started: float
    ended: float
    status: int | None
    response: Any
    replayed: bool
    error: str | None

    @property
    def acked(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def in_doubt(self) -> bool:
        return self.status is None or self.status >= 500

    @property
    def refusal(self) -> str:
        """What refused it: the invariant of a 409, else the problem code."""
        if not isinstance(self.response, dict):
            return str(self.status)
        return str(self.response.get("invariant") or self.response.get("code") or self.status)

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Recorder:
    """Every request of a run, in the order they were sent."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._n = itertools.count()

    async def call(
        self,
        http: httpx.AsyncClient,
        agent: str,
        kind: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        key: str | None = None,
        first: int | None = None,
        client_timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Op:
        n = next(self._n)
        sent = dict(headers or {})
        if key is not None:
            sent["Idempotency-Key"] = key
        started = time.monotonic()
        status, payload, replayed, error = None, None, False, None
        try:
            response = await http.request(
                method,
                path,
                json=body,
                headers=sent,
                timeout=httpx.USE_CLIENT_DEFAULT if client_timeout is None else client_timeout,
            )
            status, replayed = response.status_code, "idempotent-replayed" in response.headers
            try:
                payload = response.json()
            except ValueError:
                payload = response.text
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        op = Op(
            n,
            agent,
            kind,
            method,
            path,
            body,
            key,
            n if first is None else first,
            started,
            time.monotonic(),
            status,
            payload,
            replayed,
            error,
        )
        self.ops.append(op)
        return op


@dataclass
class Chaos:
    """How often an agent misbehaves, on purpose."""

    client_timeout: float = 0.08  # a write sent with a 1..40 ms client timeout
    duplicate: float = 0.15  # a 2xx write sent again with the same Idempotency-Key
    refused: float = 0.25  # a deliberately refused write per unit
    die: float = 0.06  # the agent stops silently; it comes back as a new sub-agent
    block: float = 0.15  # block on a question and wait for triage's answer


@dataclass
class Workload:
    """Agents and a triage principal working one server until `stop` is set."""

    url: str
    agents: dict[str, str]
    triage: str
    seed: int = 8
    lease_seconds: int = 3
    chaos: Chaos = field(default_factory=Chaos)
    recorder: Recorder = field(default_factory=Recorder)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    retry_timeout: float = 4.0
    cents: Iterator[int] = field(default_factory=lambda: itertools.count(101))
    seen_units: list[str] = field(default_factory=list)
    seen_attempts: list[str] = field(default_factory=list)
    deaths: int = 0

    async def run(self, seconds: float | None = None) -> Recorder:
        """Run every agent and triage; stop after `seconds` (or when `stop` is set)."""
        tasks = [
            asyncio.create_task(self._agent(principal, token, i))
            for i, (principal, token) in enumerate(sorted(self.agents.items()))
        ]
        tasks.append(asyncio.create_task(self._triage()))
        if seconds is not None:
            await asyncio.sleep(seconds)
            self.stop.set()
        await asyncio.gather(*tasks)
        return self.recorder

    # -- writes, with retries and chaos --------------------------------------------------

    async def write(
        self,
        http: httpx.AsyncClient,
        agent: str,
        kind: str,
        path: str,
        body: dict[str, Any],
        rnd: random.Random,
        headers: dict[str, str],
    ) -> Op:
        key = uuid.uuid4().hex
        short = rnd.random() < self.chaos.client_timeout
        op = await self.recorder.call(
            http,
            agent,
            kind,
            "POST",
            path,
            body=body,
            key=key,
            headers=headers,
            client_timeout=rnd.uniform(0.001, 0.04) if short else None,
        )
        first = op.n
        for attempt in range(4):
            if not op.in_doubt and op.refusal != IN_FLIGHT:
                break
            await asyncio.sleep(0.05 * 2**attempt)
            op = await self.recorder.call(
                http,
                agent,
                kind,
                "POST",
                path,
                body=body,
                key=key,
                first=first,
                headers=headers,
                client_timeout=self.retry_timeout,
            )
        if op.acked and rnd.random() < self.chaos.duplicate:
            await self.recorder.call(
                http, agent, kind, "POST", path, body=body, key=key, first=first, headers=headers
            )
        return op

    # -- an agent ------------------------------------------------------------------------

    async def _agent(self, principal: str, token: str, index: int) -> None:
        rnd = random.Random(self.seed * 1000 + index)
        generation = 0
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        ) as http:
            while not self.stop.is_set():
                name = principal if generation == 0 else f"{principal}/g{generation}"
                headers = {} if generation == 0 else {"X-WL-Agent": name}
                outcome = await self._one_unit(http, name, headers, rnd)
                if outcome == "died":
                    generation += 1
                    self.deaths += 1
                elif outcome == "idle":
                    await asyncio.sleep(0.1)

    async def _one_unit(
        self, http: httpx.AsyncClient, agent: str, headers: dict[str, str], rnd: random.Random
    ) -> str:
        async def write(kind: str, path: str, body: dict[str, Any]) -> Op:
            return await self.write(http, agent, kind, path, body, rnd, headers)

        claim = await write("claim", "/units/claim", {"lease_seconds": self.lease_seconds})
        if not claim.acked or claim.response["unit"] is None:
            return "idle"
        unit, attempt = claim.response["unit"], claim.response["attempt"]
        uid, aid = unit["id"], attempt["id"]
        self.seen_units.append(uid)
        if unit["state"] == "claimed":
            started = await write("start", f"/units/{uid}/transition", _to("in_progress", aid))
            if not started.acked:
                return "lost"
        if rnd.random() < self.chaos.refused:
            await self._refused_write(write, uid, aid, rnd)
        for _ in range(rnd.randint(0, 2)):
            await write("cost", f"/attempts/{aid}/cost", {"cost_cents": next(self.cents)})
        if rnd.random() < 0.3:
            beat = await write(
                "heartbeat", f"/attempts/{aid}/heartbeat", {"lease_seconds": self.lease_seconds}
            )
            if not beat.acked:
                return "lost"
        self.seen_attempts.append(aid)
        roll = rnd.random()
        if roll < self.chaos.die:
            return "died"
        if roll < self.chaos.die + self.chaos.block and not await self._blocked(
            http, write, agent, uid, aid, headers
        ):
            return "lost"
        return await self._finish(write, uid, aid, rnd)

    async def _blocked(
        self,
        http: httpx.AsyncClient,
        write: Any,
        agent: str,
        uid: str,
        aid: str,
        headers: dict[str, str],
    ) -> bool:
        """Block on a question and wait for triage to answer it: back in progress?"""
        question = "Which encoding does the legacy export use? ' OR 1=1; --"
        blocked = await write(
            "block", f"/units/{uid}/block", {"question": question, "attempt_id": aid}
        )
        if not blocked.acked:
            return False
        qid = blocked.response["question"]["id"]
        for _ in range(5):
            answer = await self.recorder.call(
                http, agent, "read", "GET", f"/questions/{qid}?wait_seconds=2", headers=headers
            )
            if answer.acked and answer.response["status"] == "answered":
                return True
        return False

    async def _finish(self, write: Any, uid: str, aid: str, rnd: random.Random) -> str:
        roll = rnd.random()
        if roll < 0.6:
            evidence = f"https://ci.example/runs/{aid}"
            verified = await write(
                "verify",
                f"/units/{uid}/transition",
                {"to": "verified", "evidence_url": evidence, "attempt_id": aid},
            )
            if verified.acked:
                await write("dispose", f"/units/{uid}/dispose", _dispose("MIGRATED", aid))
        elif roll < 0.8:
            outcome = rnd.choice(["failed", "abandoned"])
            body = {"to": "ready", "outcome": outcome, "attempt_id": aid, "reason": "flaky"}
            await write("release", f"/units/{uid}/transition", body)
        else:
            await write(
                "dispose", f"/units/{uid}/dispose", _dispose(rnd.choice(["DROPPED", "DEAD"]), aid)
            )
        return "done"

    async def _refused_write(self, write: Any, uid: str, aid: str, rnd: random.Random) -> None:
        """A write the ledger must refuse, and must leave no trace of."""
        choice = rnd.randrange(5)
        if choice == 0:
            await write("start", f"/units/{uid}/transition", _to("in_progress", aid))
        elif choice == 1:
            await write("dispose", f"/units/{uid}/dispose", _dispose("MIGRATED", aid))
        elif choice == 2 and len(self.seen_attempts) > 1:
            old = rnd.choice(self.seen_attempts[:-1])
            await write("heartbeat", f"/attempts/{old}/heartbeat", {"lease_seconds": 5})
        elif choice == 3:
            await write("cost", f"/attempts/{uuid.uuid4()}/cost", {"cost_cents": 5})
        elif len(self.seen_units) > 1:
            other = rnd.choice(self.seen_units[:-1])
            await write("claim_named", f"/units/{other}/claim", {"lease_seconds": 5})

    # -- triage --------------------------------------------------------------------------

    async def _triage(self) -> None:
        rnd = random.Random(self.seed)
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {self.triage}"}, timeout=10
        ) as http:
            while not self.stop.is_set():
                page = await self.recorder.call(
                    http, "triage", "read", "GET", "/questions?status=open&wait_seconds=1"
                )
                if not page.acked:
                    await asyncio.sleep(0.2)
                    continue
                for question in page.response["items"]:
                    body = {"answer": "UTF-8; carry on ☃", "question_id": question["id"]}
                    await self.write(
                        http,
                        "triage",
                        "unblock",
                        f"/units/{question['unit_id']}/unblock",
                        body,
                        rnd,
                        {},
                    )


def _to(state: str, attempt_id: str) -> dict[str, Any]:
    return {"to": state, "attempt_id": attempt_id}


def _dispose(disposition: str, attempt_id: str) -> dict[str, Any]:
    return {"disposition": disposition, "attempt_id": attempt_id, "reason": "history run"}


# -- the checker ---------------------------------------------------------------------------


@dataclass
class Report:
    operations: int = 0
    writes: int = 0
    acked: int = 0
    refused: int = 0
    in_doubt: int = 0
    duplicates_replayed: int = 0
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
            f"{self.duplicates_replayed} same-key retries replayed)\n"
            f"ledger: {self.units} units, {self.events} events, {self.reclaims} stale reclaims\n"
            f"refusals by invariant: {refusals}\n"
            f"violations: {len(self.violations)}"
            + "".join(f"\n  - {v}" for v in self.violations[:50])
        )


@dataclass
class Group:
    """The requests of one logical write (one Idempotency-Key)."""

    ops: list[Op]

    @property
    def first(self) -> Op:
        return self.ops[0]

    @property
    def acked(self) -> Op | None:
        return next((op for op in self.ops if op.acked), None)

    @property
    def in_doubt(self) -> bool:
        return self.acked is None and any(op.in_doubt or op.refusal == IN_FLIGHT for op in self.ops)


def _groups(ops: list[Op]) -> list[Group]:
    by_first: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        if op.method == "POST":
            by_first[op.first].append(op)
    return [Group(sorted(g, key=lambda o: o.n)) for _, g in sorted(by_first.items())]


def _signature(group: Group) -> tuple[Any, ...] | None:
    """What the write, if it took effect, appended to the event log."""
    op, acked = group.first, group.acked
    body = op.body or {}
    kind = op.kind
    if kind in ("claim", "claim_named"):
        if acked is not None and (acked.response.get("resumed") or acked.response["unit"] is None):
            return None  # a resumed claim or an empty queue writes nothing
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
    raise AssertionError(f"no signature for {kind}")


def _event_signature(event: asyncpg.Record) -> tuple[Any, ...] | None:
    kind, attempt = event["event_type"], str(event["attempt_id"])
    if kind in ("claimed", "stale_reclaimed"):
        return ("claim", event["agent_id"])
    if kind == "cost_recorded":
        return ("cost_recorded", attempt, event["cost_delta_cents"])
    if kind == "transitioned":
        return ("transitioned", attempt, event["to_state"])
    if kind == "unblocked":
        return ("unblocked", event["detail"]["question_id"])
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
    return report


def _check_effects(report: Report, groups: list[Group], events: list[asyncpg.Record]) -> None:
    acked: Counter[tuple[Any, ...]] = Counter()
    doubt: Counter[tuple[Any, ...]] = Counter()
    for group in groups:
        signature = _signature(group)
        if signature is None:
            continue
        if group.acked is not None:
            acked[signature] += 1
        elif group.in_doubt:
            doubt[signature] += 1
    written = Counter(s for s in map(_event_signature, events) if s is not None)
    for signature in set(acked) | set(doubt) | set(written):
        a, d, e = acked[signature], doubt[signature], written[signature]
        if e < a:
            report.violations.append(f"acknowledged but not in the ledger: {signature} ({a} > {e})")
        elif e > a + d:
            report.violations.append(
                f"in the ledger without an acknowledged or in-doubt write: {signature} "
                f"({e} events, {a} acknowledged, {d} in doubt)"
            )


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
    """The latest lease expiry each attempt's holder was told, per attempt."""
    leases: dict[str, dt.datetime] = {}
    for op in ops:
        if op.kind not in LEASING or not op.acked or not isinstance(op.response, dict):
            continue
        unit = op.response.get("unit")
        attempt = op.response.get("attempt") or op.response.get("question")
        if not unit or not attempt or not unit.get("lease_expires_at"):
            continue
        attempt_id = attempt["id"] if "attempt_no" in attempt else attempt["attempt_id"]
        expiry = dt.datetime.fromisoformat(unit["lease_expires_at"])
        if attempt_id not in leases or leases[attempt_id] < expiry:
            leases[attempt_id] = expiry
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
            holder[unit] = agent
            continue
        if kind in HOLDER_WRITES and holder[unit] is not None and agent != holder[unit]:
            report.violations.append(f"{where}: written by {agent} while {holder[unit]} held it")
        if kind in ("released", "disposed") or (
            kind == "transitioned" and event["to_state"] == "verified"
        ):
            holder[unit] = None


def _check_replays(report: Report, groups: list[Group]) -> None:
    for group in groups:
        acked = group.acked
        if acked is None:
            continue
        for op in group.ops:
            if op.n <= acked.n or op.status is None:
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
