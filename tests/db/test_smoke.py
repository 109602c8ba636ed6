"""The walking skeleton: a unit's whole life through the service."""

from work_ledger.domain.model import Actor, Disposition, NewUnit, State
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)


async def test_unit_life_ends_done_and_audit_is_clean(ledger: Ledger) -> None:
    """register → claim → start → cost → verify → dispose MIGRATED, audit clean."""
    await ledger.register([NewUnit("orders/refunds", "fleet-a", "orders")], OPERATOR)
    agent = Actor("agent-07")
    claim = await ledger.claim(agent.name)
    assert claim.unit is not None
    assert claim.attempt is not None
    await ledger.start(claim.unit.external_ref, agent, attempt_id=claim.attempt.id)
    await ledger.record_cost(claim.attempt.id, 250, agent)
    await ledger.verify(
        "orders/refunds", agent, "https://ci.example/run/1", attempt_id=claim.attempt.id
    )
    unit = await ledger.dispose(
        "orders/refunds", Disposition.MIGRATED, agent, attempt_id=claim.attempt.id
    )
    assert (unit.state, unit.disposition, unit.cost_cents) == (
        State.DONE,
        Disposition.MIGRATED,
        250,
    )
    assert await ledger.audit() == []
