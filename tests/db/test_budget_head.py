"""Pull-next past a spent scope at the head of the queue: the claim asks the budgets of the
oldest unit it could lock, and only when that scope is spent does it look further, asking
each candidate (claim_next_unit's `head` and `past_spent`)."""

from __future__ import annotations

import asyncio

import asyncpg

from support.racing import racing_ledgers
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def _claimed_refs(
    ledger: Ledger, tag: str, agents: int, domain: str | None = None
) -> list[str]:
    """What `agents` new agents (one pull-next each) claim, in order."""
    refs = []
    for n in range(agents):
        claim = await ledger.claim(f"{tag}-{n}", domain=domain)
        if claim.unit is None:
            break
        refs.append(claim.unit.external_ref)
    return refs


async def test_a_spent_domain_at_the_head_is_passed(ledger: Ledger) -> None:
    """The oldest units are in a spent fleet-and-domain scope: pull-next claims the others in
    queue order (the same domain of another fleet too), and nothing of the spent scope."""
    await ledger.register([NewUnit(f"spent-{i}", "f", "spent") for i in range(5)], OPERATOR)
    await ledger.register([NewUnit(f"open-{i}", "f", "open") for i in range(2)], OPERATOR)
    await ledger.register([NewUnit(f"other-{i}", "g", "spent") for i in range(2)], OPERATOR)
    await ledger.set_budget("f", 0, OPERATOR, domain="spent")
    assert await _claimed_refs(ledger, "a", 3, domain="spent") == ["other-0", "other-1"]
    assert await _claimed_refs(ledger, "b", 3) == ["open-0", "open-1"]


async def test_a_spent_fleet_at_the_head_is_passed(ledger: Ledger) -> None:
    """A fleet-wide budget spent: none of the fleet's domains is claimed, another fleet's
    units behind them are; raising the cap lets the head be claimed first again."""
    await ledger.register([NewUnit(f"f-{i}", "f", f"d{i % 2}") for i in range(4)], OPERATOR)
    await ledger.register([NewUnit("g-0", "g", "d0")], OPERATOR)
    await ledger.set_budget("f", 0, OPERATOR)
    assert await _claimed_refs(ledger, "a", 1, domain="d1") == []
    assert await _claimed_refs(ledger, "b", 1, domain="d0") == ["g-0"]
    await ledger.set_budget("f", 1, OPERATOR)
    assert await _claimed_refs(ledger, "c", 1) == ["f-0"]


async def test_racing_agents_pass_a_spent_head(database_url: str, raw: asyncpg.Connection) -> None:
    """16 agents at once, rounds of them, with 40 units of a spent scope at the head: every
    open unit is claimed exactly once and no unit of the spent scope ever is."""
    async with racing_ledgers(database_url, 16) as ledgers:
        for round_no in range(5):
            spent, opened = f"spent{round_no}", f"open{round_no}"
            await ledgers[0].register(
                [NewUnit(f"{spent}-{i}", "f", spent) for i in range(40)], OPERATOR
            )
            await ledgers[0].register(
                [NewUnit(f"{opened}-{i}", "f", opened) for i in range(24)], OPERATOR
            )
            await ledgers[0].set_budget("f", 0, OPERATOR, domain=spent)

            async def agent(ledger: Ledger, name: str) -> list[str]:
                claim = await ledger.claim(name)
                return [] if claim.unit is None else [claim.unit.external_ref]

            got = await asyncio.gather(
                *(agent(ledgers[n], f"r{round_no}-a{n}-{k}") for k in range(2) for n in range(16))
            )
            refs = [r for rs in got for r in rs]
            assert sorted(refs) == sorted(f"{opened}-{i}" for i in range(24))
            assert (
                await raw.fetchval(
                    "SELECT count(*) FROM work_units WHERE domain = $1 AND state <> 'ready'", spent
                )
                == 0
            )
