"""The history workload under the fleet's flow controls (DESIGN §13, issue 38).

`FlowWorkload` is `Workload` (agents dying silently so their leases lapse and are
reclaimed, blocks answered by triage, 1-40 ms client timeouts retried under their key,
same-key duplicates) plus an operator who steers the fleet while the agents work:
- fleet `f` is capped (6 live, lowered to 3 under load and raised back), its domain
  `narrow` capped at 2, its domain `weekend` paused and resumed over and over;
- fleet `g` is paused fleet-wide and resumed, while its domain's own control says not
  paused (which must not lift the fleet's pause);
- units of `f/keyed` carry exclusion keys in overlapping pairs {a,b}, {b,c}, {c,a}, and
  some `narrow` units carry one too;
- agents, holding nothing, name units of paused, capped or keyed scopes in claims the
  ledger must refuse by the rule.
A `Snapshots` task samples `pg_current_snapshot()` all along: `flow_history` replays the
ledger's committed states at those instants from the rows' top-level transactions.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

from support.workload import Op, Workload

KEY_PAIRS = (("mod-a", "mod-b"), ("mod-b", "mod-c"), ("mod-c", "mod-a"))
FLEET_CAP, LOWERED_CAP, NARROW_CAP = 6, 3, 2
# Every scope has its control row before any agent claims: the admission trigger locks
# the rows that exist, so a row created mid-run would race the claims already deciding.
SCOPES: tuple[dict[str, Any], ...] = (
    {"fleet": "f", "max_live": FLEET_CAP},
    {"fleet": "f", "domain": "narrow", "max_live": NARROW_CAP},
    {"fleet": "f", "domain": "weekend", "paused": False},
    {"fleet": "f", "domain": "keyed", "max_live": None},
    {"fleet": "g", "paused": False},
    {"fleet": "g", "domain": "x", "paused": False},
)


@dataclass(frozen=True)
class Sample:
    """A committed state of the database: the snapshot taken between `before` and `after`
    (time.monotonic(), as the recorder's), as xmin, xmax and the transactions in flight."""

    before: float
    after: float
    xmin: int
    xmax: int
    xip: frozenset[int]

    def sees(self, xid: int) -> bool:
        """Whether a committed row written by transaction `xid` is visible in it."""
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)


def parse_snapshot(text: str, before: float, after: float) -> Sample:
    xmin, xmax, xip = text.split(":")
    return Sample(
        before, after, int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x)
    )


class Snapshots:
    """Samples the database's snapshot every few milliseconds until stopped."""

    def __init__(self, database_url: str, every: float = 0.01) -> None:
        self.url, self.every = database_url, every
        self.samples: list[Sample] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            while not self.stop.is_set():
                before = time.monotonic()
                text = await conn.fetchval("SELECT pg_current_snapshot()::text")
                self.samples.append(parse_snapshot(text, before, time.monotonic()))
                await asyncio.sleep(self.every)
        finally:
            await conn.close()


@dataclass
class FlowWorkload(Workload):
    operator: str = ""
    refs: list[str] = field(default_factory=list)  # every ref the operator registered
    counts: Counter[str] = field(default_factory=Counter)
    waves: int = 0

    async def run(self, seconds: float | None = None) -> Any:
        async with self._http(self.operator, len(self.agents) + 1) as http:
            rnd = random.Random(self.seed * 11 + 3)
            for scope in SCOPES:
                await self._control(http, rnd, scope)
            await self._register_wave(http, rnd)
        operator = asyncio.create_task(self._operator())
        try:
            return await super().run(seconds)
        finally:
            await operator

    # -- the operator ----------------------------------------------------------------------

    async def _operator(self) -> None:
        rnd = random.Random(self.seed * 13 + 5)
        async with self._http(self.operator, len(self.agents) + 1) as http:
            tick = 0
            while not self.stop.is_set():
                tick += 1
                page = await self.recorder.call(
                    http, "op", "read", "GET", "/units?state=ready&limit=60"
                )
                if page.acked and len(page.response["items"]) < 40:
                    await self._register_wave(http, rnd)
                if tick % 4 == 0:  # a weekend pause, about a second each way
                    await self._control(
                        http, rnd, {"fleet": "f", "domain": "weekend", "paused": tick % 8 == 0}
                    )
                if tick % 6 == 0:  # the whole of fleet g, its domain saying "not paused"
                    await self._control(http, rnd, {"fleet": "g", "paused": tick % 12 == 0})
                if tick % 5 == 0:  # the fleet's cap lowered under load, then raised back
                    cap = LOWERED_CAP if tick % 10 == 0 else FLEET_CAP
                    await self._control(http, rnd, {"fleet": "f", "max_live": cap})
                await asyncio.sleep(0.25)

    async def _control(self, http: httpx.AsyncClient, rnd: random.Random, body: Any) -> Op:
        self.counts["control changes"] += 1
        body = {**body, "reason": "history run: steering the fleet"}
        return await self.write(http, "op", "control", "/controls", body, rnd, {})

    async def _register_wave(self, http: httpx.AsyncClient, rnd: random.Random) -> None:
        w = f"w{self.waves}-{uuid.uuid4().hex[:4]}"
        self.waves += 1

        def unit(name: str, fleet: str, domain: str, *keys: str) -> dict[str, Any]:
            found: dict[str, Any] = {"external_ref": f"{w}:{domain}:{name}", "fleet": fleet,
                                     "domain": domain}  # fmt: skip
            if keys:
                found["exclusive"] = list(keys)
            return found

        units = [
            *(unit(f"n{i}", "f", "narrow", *(["mod-a"] if i == 0 else [])) for i in range(4)),
            *(unit(f"k{i}", "f", "keyed", *KEY_PAIRS[i % 3]) for i in range(6)),
            *(unit(f"p{i}", "f", "weekend") for i in range(4)),
            *(unit(f"o{i}", "f", "open") for i in range(4)),
            *(unit(f"x{i}", "g", "x") for i in range(3)),
        ]
        rnd.shuffle(units)  # the queue's order mixes scopes: the capped and paused ahead
        self.refs += [u["external_ref"] for u in units]
        await self.write(http, "op", "register", "/units", {"units": units}, rnd, {})

    # -- an agent: named claims the controls refuse, then the usual unit --------------------

    async def _one_unit(
        self, http: httpx.AsyncClient, agent: str, headers: dict[str, str], rnd: random.Random
    ) -> str:
        if self.refs and rnd.random() < 0.15:
            ref = rnd.choice(self.refs[-80:])
            body = {"lease_seconds": self.lease_seconds}
            await self.write(http, agent, "claim_named", f"/units/{ref}/claim", body, rnd, headers)
        return await super()._one_unit(http, agent, headers, rnd)
