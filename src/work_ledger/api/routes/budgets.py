"""Budgets (DESIGN §12): set the cap of a fleet or of one of its domains, list them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from work_ledger.api import problems
from work_ledger.api.answers import BudgetPage
from work_ledger.api.auth import Caller, require, token_doc
from work_ledger.api.request_state import ledger
from work_ledger.api.schemas import BudgetIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.service.budgets import Budget
from work_ledger.service.keyed import Keying
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

router = APIRouter(tags=["budgets"])
LedgerDep = Annotated[Ledger, Depends(ledger)]
# Agents spend; they do not read the fleet's books.
NotAgent = Annotated[Caller, Depends(require(*(r for r in Role if r is not Role.AGENT)))]


SET_BUDGET = WriteOf(BudgetIn)


@router.post(
    "/budgets",
    responses=problems.WRITE_RESPONSES,
    response_model=Budget,
    openapi_extra=SET_BUDGET.doc(),
    operation_id="setBudget",
)
async def set_budget(request: Request) -> Response:
    """Create or update the budget of a fleet (no domain) or of one domain of it
    (operator). Once the scope's units have spent `cap_cents`, nothing in it is claimed
    anew; held work goes on. Raising the cap makes the scope claimable again."""
    w = await SET_BUDGET(request)

    return await w.run(
        Keying.ATOMIC,
        lambda svc: svc.set_budget(
            w.body.fleet, w.body.cap_cents, w.caller.actor(), domain=w.body.domain
        ),
        answer,
    )


@router.get(
    "/budgets",
    responses=problems.READ_RESPONSES,
    operation_id="listBudgets",
    openapi_extra=token_doc(),
)
async def list_budgets(svc: LedgerDep, _: NotAgent) -> BudgetPage:
    """Every budget: its cap, what its scope has spent, and what remains."""
    budgets = await svc.list_budgets()
    return BudgetPage(items=budgets)
