"""The SDK's `bulk` against a real server: dry run, real run, refusals as the server's class."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from support.wl_server import LedgerServer
from work_ledger.client import AsyncClient, Client, NewUnit
from work_ledger.errors import Forbidden, InvalidInput


@pytest.fixture
async def async_operator(ledger_server: LedgerServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(ledger_server.url, ledger_server.token("operator", "op")) as client:
        yield client


def test_bulk_dry_run_then_apply(operator: Client, agent: Client) -> None:
    """A dry run changes nothing and names what the real run then changes; a claimed unit
    is skipped with the rule."""
    operator.register([NewUnit(f"orders/{n}", "legacy", "orders") for n in "abc"])
    agent.claim_work(unit="orders/c", start=False)
    dry = operator.bulk(
        "dispose", "legacy", domain="orders", disposition="DEFERRED", reason="switched off"
    )
    assert (dry.dry_run, dry.matched, dry.operation_id) == (True, 3, None)
    assert operator.get_unit("orders/a").unit.state == "ready"
    real = operator.bulk(
        "dispose",
        "legacy",
        domain="orders",
        disposition="DEFERRED",
        reason="switched off",
        dry_run=False,
    )
    assert (real.changed, real.skipped) == (dry.changed, dry.skipped)
    assert [(c.external_ref, c.from_state, c.to_state) for c in real.changed] == [
        ("orders/a", "ready", "abandoned"),
        ("orders/b", "ready", "abandoned"),
    ]
    assert [(s.external_ref, s.rule) for s in real.skipped] == [
        ("orders/c", "unit_state_transition_allowed")
    ]
    assert real.operation_id is not None
    assert operator.get_unit("orders/a").unit.disposition == "DEFERRED"


async def test_async_bulk_release_and_refusals(
    operator: Client, agent: Client, async_operator: AsyncClient
) -> None:
    """The async client releases what an agent holds; over the limit is `InvalidInput`
    naming the count; an agent's bulk is `Forbidden`."""
    operator.register([NewUnit(f"u{n}", "f") for n in range(3)])
    held = agent.claim_work(start=False)
    released = await async_operator.bulk(
        "release", "f", held_by="agent-1", states=["claimed"], reason="bad model", dry_run=False
    )
    assert [c.external_ref for c in released.changed] == [held.unit.external_ref]
    with pytest.raises(InvalidInput, match="matches 3 units, more than limit 2"):
        await async_operator.bulk("release", "f", reason="r", limit=2)
    with pytest.raises(Forbidden):
        agent.bulk("release", "f", reason="r")
