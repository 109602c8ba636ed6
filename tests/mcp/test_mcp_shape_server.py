"""The MCP tools on DESIGN §12 against a real server: a spent budget stops the claim tool,
split hands a unit back as children, record_cost keeps the model and its tokens."""

from __future__ import annotations

from test_mcp_server import call, in_process, text

from support.wl_server import LedgerServer
from work_ledger.client import Client, ModelCost, NewUnit


async def test_mcp_claim_stops_at_a_spent_budget_naming_cap_and_spend(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """Once the fleet spent its cap, claim says so (cap, spend) and says to stop."""
    operator.register([NewUnit("a", "f"), NewUnit("b", "f")])
    operator.set_budget("f", 50)
    async with in_process(ledger_server) as session:
        assert not (await call(session, "claim", unit="a")).is_error
        cost = {"cost_cents": 80, "model": "claude-opus-4-6", "output_tokens": 900}
        assert not (await call(session, "record_cost", **cost)).is_error
        assert not (await call(session, "release", reason="done for today")).is_error
        stopped = await call(session, "claim")
    assert stopped.is_error
    assert text(stopped).startswith("budget_exhausted: the budget of fleet f: 80 of 50 cents")
    assert "Stop claiming" in text(stopped)
    (attempt,) = operator.get_unit("a").attempts
    assert attempt.cost_by_model == [ModelCost("claude-opus-4-6", 80, 0, 0, 900, 0, 0)]


async def test_mcp_split_hands_back_children_and_claim_names_what_waits(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """split in order: the parent waits on both children, the second on the first; with
    the first child held, claim has nothing left and names what the others wait on."""
    operator.register([NewUnit("big", "f")])
    async with in_process(ledger_server) as session:
        assert not (await call(session, "claim")).is_error
        done = await call(session, "split", children=["big/1", "big/2"], in_order=True)
        assert text(done).startswith("Split big into 2 units: big/1, big/2. It is waiting")
        first = await call(session, "claim")
        assert "Claimed unit big/1" in text(first)
    async with in_process(ledger_server, "agent-2") as other:
        empty = await call(other, "claim")
    assert empty.is_error
    assert "- big waits on prerequisite big/1 (in_progress); prerequisite big/2 (waiting)" in text(
        empty
    )
    assert "- big/2 waits on prerequisite big/1 (in_progress)" in text(empty)


async def test_mcp_claim_says_a_child_is_part_of_its_parent_and_a_parent_is_to_integrate(
    ledger_server: LedgerServer, operator: Client
) -> None:
    """A child's claim names its parent; once the children are done, the parent's claim
    says to integrate their work rather than do it again."""
    operator.register([NewUnit("big", "f")])
    async with in_process(ledger_server) as session:
        assert not (await call(session, "claim")).is_error
        assert not (await call(session, "split", children=["big/1", "big/2"])).is_error
        for child in ("big/1", "big/2"):
            claimed = await call(session, "claim", unit=child)
            assert "It is one part of big, split from it." in text(claimed)
            await call(session, "verify", unit=child, evidence_url="https://ci.example/runs/1")
            await call(session, "dispose", unit=child, disposition="MIGRATED")
        back = await call(session, "claim")
    assert "Claimed unit big: " in text(back)
    assert "It was split into big/1, big/2, now finished: integrate their work" in text(back)
