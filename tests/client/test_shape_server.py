"""The SDK on DESIGN §12 against a real server: prerequisites, split, waive, budgets and
cost by model, each refusal raised as the server's own class."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from work_ledger.client import Client, CostRecord, NewUnit, NothingToClaim
from work_ledger.errors import BudgetExhausted, PrerequisitesUnfinished

EVIDENCE = "https://ci.example/runs/12"


def finish(client: Client, ref: str) -> None:
    """Claim `ref`, verify it and dispose it MIGRATED."""
    with client.claim(unit=ref) as work:
        work.verify(EVIDENCE)
        work.dispose("MIGRATED")


def test_a_unit_waits_on_its_prerequisite_until_it_is_done(operator: Client, agent: Client) -> None:
    """`requires`: registered waiting, a named claim is refused naming the prerequisite,
    and finishing it makes the dependent ready."""
    operator.register([NewUnit("lib", "f"), NewUnit("svc", "f", requires=("lib",), max_attempts=2)])
    detail = agent.get_unit("svc")
    assert (detail.unit.state, detail.unit.max_attempts) == ("waiting", 2)
    assert [(w.kind, w.unit.external_ref if w.unit else None) for w in detail.waiting_on] == [
        ("prerequisite", "lib")
    ]
    assert [r.external_ref for r in detail.requires] == ["lib"]
    with pytest.raises(PrerequisitesUnfinished) as refused:
        agent.claim_unit("svc")
    assert refused.value.extra["waiting_on"][0]["unit"]["external_ref"] == "lib"
    finish(agent, "lib")
    after = agent.get_unit("svc")
    assert (after.unit.state, after.waiting_on) == ("ready", [])


def test_work_split_hands_back_children_and_the_parent_waits(
    operator: Client, agent: Client
) -> None:
    """Work.split: the attempt ends `split`, the parent waits on its children, which
    carry it as their parent; once they are done the parent is ready again."""
    operator.register([NewUnit("big", "f", "orders")])
    with agent.claim() as work:
        done = work.split(["big/1", "big/2"], reason="too big")
        assert not work.live
    assert [c.external_ref for c in done.children] == ["big/1", "big/2"]
    parent = agent.get_unit("big")
    assert (parent.unit.state, parent.attempts[0].outcome) == ("waiting", "split")
    assert [c.external_ref for c in parent.children] == ["big/1", "big/2"]
    child = agent.get_unit("big/1")
    assert (child.parent.external_ref if child.parent else None, child.unit.domain) == (
        "big",
        "orders",
    )
    finish(agent, "big/1")
    finish(agent, "big/2")
    assert agent.get_unit("big").unit.state == "ready"


def test_waive_frees_a_unit_held_by_a_dead_prerequisite(operator: Client, agent: Client) -> None:
    """A DEAD prerequisite never finishes; the operator's waive makes the dependent ready."""
    operator.register([NewUnit("lib", "f"), NewUnit("svc", "f", requires=("lib",))])
    with agent.claim(unit="lib") as work:
        work.dispose("DEAD", reason="cannot be migrated")
    assert agent.get_unit("svc").unit.state == "waiting"
    assert operator.waive("svc", "lib", reason="svc goes on without it").state == "ready"


def test_a_spent_budget_stops_claims_but_not_cost_records(
    operator: Client, agent: Client, make_client: Callable[..., Client]
) -> None:
    """Cost by model past the cap is recorded; then pull-next finds nothing and a named
    claim is refused naming the cap and the spend; raising the cap lets it through."""
    operator.register([NewUnit("a", "f"), NewUnit("b", "f")])
    operator.set_budget("f", 100)
    with agent.claim(unit="a") as work:
        work.cost(90, model="claude-opus-4-6", input_tokens=1000, output_tokens=50)
        work.record(CostRecord(30, "claude-haiku-4-5", cache_read_tokens=7, estimated=True))
        work.verify(EVIDENCE)
    (budget,) = operator.budgets()
    assert (budget.spent_cents, budget.cap_cents, budget.remaining_cents) == (120, 100, 0)
    by_model = {m.model: m for m in agent.get_unit("a").attempts[0].cost_by_model}
    assert (
        by_model["claude-opus-4-6"].input_tokens,
        by_model["claude-haiku-4-5"].estimated_cents,
    ) == (1000, 30)
    other = make_client("agent", "agent-2")
    with pytest.raises(NothingToClaim):
        other.claim_work()
    with pytest.raises(BudgetExhausted) as refused:
        other.claim_unit("b")
    assert (refused.value.extra["cap_cents"], refused.value.extra["spent_cents"]) == (100, 120)
    operator.set_budget("f", 500)
    assert other.claim_work().unit.external_ref == "b"
