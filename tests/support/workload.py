"""A randomized workload of concurrent HTTP agents, and the history it records.

`Workload` drives many agents (each with its own token) and one triage principal against a
running server: claims, starts, heartbeats, costs, blocks and answers, verifies, disposals,
releases, deliberate refusals, deliberate retries with the same Idempotency-Key, random
client timeouts, and agents that die silently and come back as a new sub-agent. Every
request and its response (or its absence) is an `Op` in the `Recorder`; `history.check`
holds the record against the ledger.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

# Refusals that say "your first request may or may not have taken effect": in doubt.
UNKNOWN_OUTCOME = frozenset({"idempotency_key_in_flight", "idempotency_outcome_unknown"})


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
    doomed: set[str] = field(default_factory=set)  # agents that die on their first unit
    # Each worker's transport by index (agents, then triage); None: httpx's default, to `url`.
    transport: Callable[[int], httpx.AsyncBaseTransport] | None = None
    # How a held unit ends, by one roll: MIGRATED below the first, released below the
    # second, DROPPED below the third, DEAD above it.
    MIGRATED_BELOW: ClassVar[float] = 0.6
    RELEASED_BELOW: ClassVar[float] = 0.8
    DROPPED_BELOW: ClassVar[float] = 0.9

    def _http(self, token: str, index: int) -> httpx.AsyncClient:
        """The HTTP client of the `index`th worker (its own transport, when one is given)."""
        transport = None if self.transport is None else self.transport(index)
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
            transport=transport,
        )

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
            if not op.in_doubt and op.refusal not in UNKNOWN_OUTCOME:
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
        async with self._http(token, index) as http:
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
        if roll < self.chaos.die or agent in self.doomed:
            self.doomed.discard(agent)
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

    def _must_migrate(self, uid: str) -> bool:
        """Whether this unit ends MIGRATED whatever the roll (a split parent, for one)."""
        return False

    async def _finish(self, write: Any, uid: str, aid: str, rnd: random.Random) -> str:
        roll = rnd.random()
        if roll < self.MIGRATED_BELOW or self._must_migrate(uid):
            evidence = f"https://ci.example/runs/{aid}"
            verified = await write(
                "verify",
                f"/units/{uid}/transition",
                {"to": "verified", "evidence_url": evidence, "attempt_id": aid},
            )
            if verified.acked:
                await write("dispose", f"/units/{uid}/dispose", _dispose("MIGRATED", aid))
        elif roll < self.RELEASED_BELOW:
            outcome = rnd.choice(["failed", "abandoned"])
            body = {"to": "ready", "outcome": outcome, "attempt_id": aid, "reason": "flaky"}
            await write("release", f"/units/{uid}/transition", body)
        else:
            disposition = "DROPPED" if roll < self.DROPPED_BELOW else "DEAD"
            await write("dispose", f"/units/{uid}/dispose", _dispose(disposition, aid))
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
        async with self._http(self.triage, len(self.agents)) as http:
            while not self.stop.is_set():
                page = await self.recorder.call(
                    http, "triage", "read", "GET", "/questions?status=open&wait_seconds=1"
                )
                if not page.acked:
                    await asyncio.sleep(0.2)
                    continue
                for question in page.response["items"]:
                    await self._answer(http, question, rnd)

    async def _answer(
        self, http: httpx.AsyncClient, question: dict[str, Any], rnd: random.Random
    ) -> None:
        body = {"answer": "UTF-8; carry on ☃", "question_id": question["id"]}
        await self.write(
            http, "triage", "unblock", f"/units/{question['unit_id']}/unblock", body, rnd, {}
        )


def _to(state: str, attempt_id: str) -> dict[str, Any]:
    return {"to": state, "attempt_id": attempt_id}


def _dispose(disposition: str, attempt_id: str) -> dict[str, Any]:
    return {"disposition": disposition, "attempt_id": attempt_id, "reason": "history run"}
