"""Budgets (DESIGN §12): set the cap of a fleet or of one of its domains, list them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from work_ledger.api import problems
from work_ledger.api.deps import Caller, IdempotentRoute, ledger, require
from work_ledger.api.schemas import BudgetIn, BudgetOut, BudgetPage
from work_ledger.api.wire import answer, body_doc, json_body
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

router = APIRouter(tags=["budgets"], route_class=IdempotentRoute)
LedgerDep = Annotated[Ledger, Depends(ledger)]
# Agents spend; they do not read the fleet's books.
NotAgent = Annotated[Caller, Depends(require(*(r for r in Role if r is not Role.AGENT)))]


@router.post(
    "/budgets",
    responses=problems.WRITE_RESPONSES,
    response_model=BudgetOut,
    openapi_extra=body_doc(BudgetIn),
)
async def set_budget(
    request: Request, svc: LedgerDep, caller: Annotated[Caller, Depends(require())]
) -> Response:
    """Create or update the budget of a fleet (no domain) or of one domain of it
    (operator). Once the scope's units have spent `cap_cents`, nothing in it is claimed
    anew; held work goes on. Raising the cap makes the scope claimable again."""
    body = await json_body(request, BudgetIn)
    budget = await svc.set_budget(body.fleet, body.cap_cents, caller.actor(), domain=body.domain)
    return answer(BudgetOut.model_validate(budget))


@router.get("/budgets", responses=problems.READ_RESPONSES)
async def list_budgets(svc: LedgerDep, _: NotAgent) -> BudgetPage:
    """Every budget: its cap, what its scope has spent, and what remains."""
    budgets = await svc.list_budgets()
    return BudgetPage.model_validate({"items": budgets}, from_attributes=True)
