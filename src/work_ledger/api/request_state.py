"""What a request reads from the app (its ledger) and leaves in its ASGI scope's `state`
for the middlewares outside the routes: who called (`principal`), the unit it concerned
(`unit_id`, for the access line) and what a claim answered (`claim_result`, for metrics).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Request

from work_ledger.domain.model import Claim
from work_ledger.service.ledger import Ledger

ClaimResult = Literal["new", "resumed", "none"]


def state_of(request: Request) -> dict[str, Any]:
    """The request's state (what `request.state` reads and writes), as its plain dict: the
    request path reads it a few times per request, without the State wrapper's lookups."""
    state: dict[str, Any] = request.scope.setdefault("state", {})
    return state


# Dependencies are `async def` even when they never await: FastAPI runs a plain `def`
# dependency in a worker thread, a hop that cost ~10% of serve's time on the claim path.
async def ledger(request: Request) -> Ledger:
    """The app's ledger (the reads; writes go through `api.writes`)."""
    value: Ledger = request.app.state.ledger
    return value


def unit_logged(request: Request, unit_id: Any) -> None:
    """Name the unit in this request's access log line."""
    state_of(request)["unit_id"] = str(unit_id)


def claim_answered(request: Request, claim: Claim) -> None:
    """Tell the metrics what this claim answered, and name its unit in the access line."""
    state = state_of(request)
    if claim.unit is None:
        state["claim_result"] = "none"
        return
    state["unit_id"] = str(claim.unit.id)
    state["claim_result"] = "resumed" if claim.resumed else "new"
