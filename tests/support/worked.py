"""A small ledger at work: units in several states, with costs and a blocking question."""

from __future__ import annotations

from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.service.ledger import Ledger


async def worked(ledger: Ledger) -> None:
    """Units in several states: claimed, costed, blocked on a question, verified, done."""
    operator = Actor("op", privileged=True)
    await ledger.register([NewUnit(f"x-{i}", "f", "d") for i in range(5)], operator)
    for i in range(3):
        agent = Actor(f"agent-{i}", privileged=False)
        claim = await ledger.claim(agent.name)
        assert claim.unit is not None
        assert claim.attempt is not None
        ref = claim.unit.external_ref
        await ledger.start(ref, agent)
        await ledger.record_cost(claim.attempt.id, 100 + i, agent)
        if i == 0:
            await ledger.block(ref, agent, "which schema?")
        else:
            await ledger.verify(ref, agent, f"https://ci.example/{i}")
    await ledger.dispose("x-1", Disposition.MIGRATED, operator)
