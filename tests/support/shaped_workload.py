"""The history workload with the work's shape and money (DESIGN §12).

`ShapedWorkload` is `Workload` (agents, triage, deaths, client timeouts, same-key retries)
plus an operator, and agents that meet what §12 adds:
- the operator registers the backlog in waves while the agents work: chains of libraries,
  diamonds, services requiring them, poison units with a low attempt limit and their
  dependents; each wave as two batches sent at once that both create the wave's shared
  prerequisites (the race of migration 0018);
- agents record cost with a model and tokens, split some units into children (a child may
  require its sibling) and integrate a split parent when it comes back, release poison
  units `failed` until the ledger parks them, and try named claims that must be refused
  (waiting units, units in a spent budget);
- triage answers the ledger's questions on parked units (twice per unit; then the operator
  disposes it DEAD), so units get more attempts;
- the operator keeps budgets (a domain's and a fleet's caps that get spent, raised once
  they have been spent a while), waives requirements on DEAD or DEFERRED prerequisites,
  and now and then disposes a waiting unit DEFERRED, holding its own dependents.
Every request is recorded as in `Workload`; `shape_history.check_shape` holds it against
the ledger's event log and tables.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from support.workload import Op, Workload, _to

MODELS = ("claude-opus-4", "claude-sonnet-4", "claude-haiku-4")
POISON_REASON = "the legacy build segfaults in this unit"
# Budget scopes the operator keeps: (fleet, domain or None for the whole fleet, first cap).
SCOPES = (("f", "metered", 4_000), ("lean", None, 4_000), ("f", None, 10**12))
ANSWERS_PER_PARKED_UNIT = 2


@dataclass
class ShapedWorkload(Workload):
    operator: str = ""
    waves: int = 0
    max_waves: int = 10_000
    split_parents: set[str] = field(default_factory=set)
    MIGRATED_BELOW: ClassVar[float] = 0.72
    RELEASED_BELOW: ClassVar[float] = 0.9
    DROPPED_BELOW: ClassVar[float] = 0.96
    answered: Counter[str] = field(default_factory=Counter)  # park answers acked, per unit
    refs: list[str] = field(default_factory=list)  # every ref the operator registered
    counts: Counter[str] = field(default_factory=Counter)

    async def run(self, seconds: float | None = None) -> Any:
        operator = asyncio.create_task(self._operator())
        try:
            return await super().run(seconds)
        finally:
            await operator

    # -- the operator ----------------------------------------------------------------------

    async def _operator(self) -> None:
        rnd = random.Random(self.seed * 7 + 1)
        async with self._http(self.operator, len(self.agents) + 1) as http:
            for fleet, domain, cap in SCOPES:
                await self._set_budget(http, rnd, fleet, domain, cap)
            exhausted: Counter[tuple[str, str | None]] = Counter()
            while not self.stop.is_set():
                await self._register_when_short(http, rnd)
                await self._keep_budgets(http, rnd, exhausted)
                await self._waive_or_defer(http, rnd)
                await self._dispose_parked(http, rnd)
                await asyncio.sleep(0.25)

    async def _op_write(
        self, http: httpx.AsyncClient, rnd: random.Random, kind: str, path: str, body: Any
    ) -> Op:
        return await self.write(http, "op", kind, path, body, rnd, {})

    async def _read(self, http: httpx.AsyncClient, path: str) -> Any:
        op = await self.recorder.call(http, "op", "read", "GET", path)
        return op.response if op.acked else None

    async def _set_budget(
        self, http: httpx.AsyncClient, rnd: random.Random, fleet: str, domain: str | None, cap: int
    ) -> None:
        body: dict[str, Any] = {"fleet": fleet, "cap_cents": cap}
        if domain is not None:
            body["domain"] = domain
        await self._op_write(http, rnd, "budget", "/budgets", body)

    async def _register_when_short(self, http: httpx.AsyncClient, rnd: random.Random) -> None:
        page = await self._read(http, "/units?state=ready&limit=40")
        if page is None or len(page["items"]) >= 20 or self.waves >= self.max_waves:
            return
        wave, self.waves = self.waves, self.waves + 1
        first, second = _wave(wave, rnd)
        self.refs += [u["external_ref"] for u in first + second]
        await asyncio.gather(
            self._op_write(http, rnd, "register", "/units", {"units": first}),
            self._op_write(http, rnd, "register", "/units", {"units": second}),
        )

    async def _keep_budgets(
        self,
        http: httpx.AsyncClient,
        rnd: random.Random,
        exhausted: Counter[tuple[str, str | None]],
    ) -> None:
        budgets = await self._read(http, "/budgets")
        if budgets is None:
            return
        for item in budgets["items"]:
            scope = (item["fleet"], item["domain"])
            if item["remaining_cents"] > 0:
                exhausted[scope] = 0
                continue
            exhausted[scope] += 1
            if exhausted[scope] >= 4:  # spent for about a second: raise it
                exhausted[scope] = 0
                cap = item["spent_cents"] + rnd.randint(1_500, 6_000)
                await self._set_budget(http, rnd, item["fleet"], item["domain"], cap)
                self.counts["cap raises"] += 1

    async def _waive_or_defer(self, http: httpx.AsyncClient, rnd: random.Random) -> None:
        page = await self._read(http, "/units?state=waiting&limit=100")
        if page is None:
            return
        for unit in rnd.sample(page["items"], min(8, len(page["items"]))):
            shown = await self._read(http, f"/units/{unit['id']}")
            if shown is None:
                continue
            held = [
                w["unit"]
                for w in shown["waiting_on"]
                if w["kind"] == "prerequisite" and w["unit"]["disposition"] in ("DEAD", "DEFERRED")
            ]
            if held:
                body = {"prerequisite": held[0]["id"], "reason": "rewritten in place"}
                await self._op_write(http, rnd, "waive", f"/units/{unit['id']}/waive", body)
            elif shown["waiting_on"] and rnd.random() < 0.03:
                body = {"disposition": "DEFERRED", "reason": "not this quarter"}
                await self._op_write(
                    http, rnd, "dispose_unit", f"/units/{unit['id']}/dispose", body
                )

    async def _dispose_parked(self, http: httpx.AsyncClient, rnd: random.Random) -> None:
        page = await self._read(http, "/questions?status=open&limit=200")
        if page is None:
            return
        for question in page["items"]:
            unit = question["unit_id"]
            if question["asked_by"] == "work-ledger" and (
                self.answered[unit] >= ANSWERS_PER_PARKED_UNIT
            ):
                body = {"disposition": "DEAD", "reason": "poison: fails every agent"}
                await self._op_write(http, rnd, "dispose_unit", f"/units/{unit}/dispose", body)

    # -- triage: answers the ledger's questions too, twice per unit -------------------------

    async def _answer(
        self, http: httpx.AsyncClient, question: dict[str, Any], rnd: random.Random
    ) -> None:
        unit = question["unit_id"]
        parked = question["asked_by"] == "work-ledger"
        if parked and self.answered[unit] >= ANSWERS_PER_PARKED_UNIT:
            return  # the operator disposes it
        answer = "try once more, with the new toolchain"
        body = {"answer": answer, "question_id": question["id"]}
        op = await self.write(http, "triage", "unblock", f"/units/{unit}/unblock", body, rnd, {})
        if parked and op.acked:
            self.answered[unit] += 1

    # -- an agent's unit --------------------------------------------------------------------

    async def _one_unit(
        self, http: httpx.AsyncClient, agent: str, headers: dict[str, str], rnd: random.Random
    ) -> str:
        async def write(kind: str, path: str, body: dict[str, Any]) -> Op:
            return await self.write(http, agent, kind, path, body, rnd, headers)

        if rnd.random() < 0.1:
            # Holding nothing: a named claim of a parked, waiting or metered unit is refused
            # by its own rule (one that succeeds is resumed by the pull-next below).
            await self._named_claim(write, rnd)
        claim = await write("claim", "/units/claim", {"lease_seconds": self.lease_seconds})
        if not claim.acked or claim.response["unit"] is None:
            if claim.acked and rnd.random() < 0.3:
                await self._named_claim(write, rnd)  # nothing to pull: a waiting one, perhaps?
            return "idle"
        unit, attempt = claim.response["unit"], claim.response["attempt"]
        uid, aid, ref = unit["id"], attempt["id"], unit["external_ref"]
        self.seen_units.append(uid)
        if unit["state"] == "claimed":
            started = await write("start", f"/units/{uid}/transition", _to("in_progress", aid))
            if not started.acked:
                return "lost"
        if rnd.random() < self.chaos.refused:
            if rnd.random() < 0.5:
                await self._refused_write(write, uid, aid, rnd)
            else:
                await self._named_claim(write, rnd)
        for _ in range(rnd.randint(0, 2)):
            await write("cost", f"/attempts/{aid}/cost", _cost(next(self.cents), rnd))
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
        if "poison" in ref:
            body = {"to": "ready", "outcome": "failed", "attempt_id": aid, "reason": POISON_REASON}
            await write("release", f"/units/{uid}/transition", body)
            return "done"
        if uid not in self.split_parents and ref.count(":c") < 2 and rnd.random() < 0.1:
            children = [{"external_ref": f"{ref}:c{i}"} for i in range(rnd.randint(2, 3))]
            if rnd.random() < 0.5:
                children[1]["requires"] = [children[0]["external_ref"]]  # type: ignore[assignment]
            body = {"units": children, "attempt_id": aid, "reason": "too big for one attempt"}
            split = await write("split", f"/units/{uid}/split", body)
            if split.acked:
                self.split_parents.add(uid)
            return "done"
        if roll < self.chaos.die + self.chaos.block and not await self._blocked(
            http, write, agent, uid, aid, headers
        ):
            return "lost"
        return await self._finish(write, uid, aid, rnd)

    def _must_migrate(self, uid: str) -> bool:
        return uid in self.split_parents

    async def _named_claim(self, write: Any, rnd: random.Random) -> None:
        """A named claim of a unit the operator registered: a waiting one is a 409
        prerequisites_unfinished or attempt_limit_reached, a spent scope's budget_exhausted."""
        if self.refs:
            recent = self.refs[-60:]
            metered = [r for r in recent if "metered" in r or "lean" in r]
            poison = [r for r in recent if "poison" in r]  # parked: attempt_limit_reached
            roll = rnd.random()
            pool = metered if roll < 0.4 else poison if roll < 0.7 else self.refs
            ref = rnd.choice(pool or self.refs)
            await write("claim_named", f"/units/{ref}/claim", {"lease_seconds": self.lease_seconds})


def _cost(cents: int, rnd: random.Random) -> dict[str, Any]:
    """A cost record: distinct cents (so the checker can trace it), mostly with a model."""
    body: dict[str, Any] = {"cost_cents": cents}
    if rnd.random() < 0.85:
        body |= {
            "model": rnd.choice(MODELS),
            "input_tokens": rnd.randint(0, 200_000),
            "output_tokens": rnd.randint(0, 20_000),
            "cache_read_tokens": rnd.randint(0, 500_000),
            "cache_write_tokens": rnd.randint(0, 50_000),
            "estimated": rnd.random() < 0.5,
        }
    return body


def _wave(n: int, rnd: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two overlapping batches of wave n: both carry the shared prerequisites (a chain of
    three libraries, a diamond's top), each its own dependents."""
    w = f"w{n}-{uuid.uuid4().hex[:4]}"
    lib = [f"{w}:lib{i}" for i in range(3)]
    shared: list[dict[str, Any]] = [
        {"external_ref": lib[0], "fleet": "f", "domain": "libs"},
        {"external_ref": lib[1], "fleet": "f", "domain": "libs", "requires": [lib[0]]},
        {"external_ref": lib[2], "fleet": "f", "domain": "libs", "requires": [lib[1]]},
        {"external_ref": f"{w}:top", "fleet": "f", "domain": "svc"},
    ]

    def unit(ref: str, *requires: str, fleet: str = "f", domain: str = "svc", **extra: Any) -> Any:
        names = [r if r.startswith(w) else f"{w}:{r}" for r in requires]
        return {"external_ref": f"{w}:{ref}", "fleet": fleet, "domain": domain,
                "requires": names, **extra}  # fmt: skip

    first = [
        unit("left", "top"),
        unit("right", "top", max_attempts=rnd.randint(1, 3)),
        unit("bottom", "left", "right"),
        unit("poison", max_attempts=rnd.randint(1, 2)),
        unit("after-poison", "poison"),
        *(unit(f"svc{i}", rnd.choice(lib)) for i in range(4)),
    ]
    second = [
        unit("billing", lib[2], "top"),
        *(unit(f"metered{i}", domain="metered") for i in range(4)),
        unit("metered-dep", "metered0", domain="metered"),
        *(unit(f"lean{i}", fleet="lean", domain="lean") for i in range(3)),
        *(unit(f"plain{i}", domain="plain", max_attempts=rnd.randint(1, 5)) for i in range(4)),
    ]
    cut = rnd.randint(0, 2)  # the shared units first, last or between, in each batch
    return first[:cut] + shared + first[cut:], second + shared
