"""Claims: pull-next (optionally a long-poll) and named."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, Request, Response

from work_ledger.api import problems
from work_ledger.api.answers import UnitAttempt
from work_ledger.api.longpoll import Notifier
from work_ledger.api.request_state import claim_answered
from work_ledger.api.routes.units import UnitRef
from work_ledger.api.schemas import ClaimIn, LeaseIn
from work_ledger.api.wire import answer
from work_ledger.api.writes import WriteOf
from work_ledger.domain.model import Claim
from work_ledger.service.keyed import Keying, Look
from work_ledger.service.tokens import Role

router = APIRouter(tags=["units"], responses=problems.READ_RESPONSES)


def _claim_out(request: Request, claim: Claim) -> Response:
    claim_answered(request, claim)
    return answer(claim)


CLAIM_NEXT = WriteOf(ClaimIn, Role.AGENT)


@router.post(
    "/units/claim",
    responses=problems.WRITE_RESPONSES,
    response_model=Claim,
    openapi_extra=CLAIM_NEXT.doc(),
    operation_id="claimNext",
)
async def claim_next(request: Request) -> Response:
    """Claim the oldest claimable unit, or get back the one you hold (`resumed`).

    With `wait_seconds`, waits until a unit becomes claimable; `unit` is null when none
    did in time. Use the returned `attempt.id` for heartbeats, cost and fencing."""
    w = await CLAIM_NEXT(request)

    def answered(claim: Claim) -> Response:
        return _claim_out(request, claim)

    if w.body.wait_seconds == 0:
        # No long-poll: no place in the waiters' queue either (a claim that will not wait
        # needs no turn, and a wake-up meant for a waiter never lands on it).
        return await w.run(
            Keying.RERUNNABLE,
            lambda svc: svc.claim(
                w.caller.agent, domain=w.body.domain, lease_seconds=w.body.lease_seconds
            ),
            answered,
        )

    async def wait(look: Look) -> Claim:
        return await _wait_for_claim(request, look, w.caller.agent, w.body)

    return await w.looks(wait, answered)


async def _wait_for_claim(request: Request, look: Look, agent: str, body: ClaimIn) -> Claim:
    """Look for a unit until one is claimed or `body.wait_seconds` have passed, in turn
    with the other waiters for the same domain (api/longpoll.py)."""
    notifier: Notifier = request.app.state.notifier
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_seconds
    queue = notifier.claims(body.domain)
    while True:
        turn = queue.enter()  # queued before looking, so no wake-up is missed
        claimed = looking_again = False
        try:
            claim = await look(agent, domain=body.domain, lease_seconds=body.lease_seconds)
            claimed = claim.unit is not None and not claim.resumed
            remaining = deadline - loop.time()
            if claim.unit is not None or remaining <= 0 or notifier.draining:
                return claim
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(turn), remaining)
            if await request.is_disconnected():  # never claim for a caller that has gone
                return Claim(None, None)
            looking_again = True
        finally:
            queue.leave(turn, claimed=claimed, looking_again=looking_again)


CLAIM_NAMED = WriteOf(LeaseIn, Role.AGENT)


@router.post(
    "/units/{unit:path}/claim",
    responses=problems.WRITE_RESPONSES,
    response_model=UnitAttempt,
    openapi_extra=CLAIM_NAMED.doc(),
    operation_id="claimUnit",
)
async def claim_named(
    request: Request,
    unit: UnitRef,
) -> Response:
    """Claim this unit; 409 naming the holder and lease expiry if it is held or closed."""
    w = await CLAIM_NAMED(request)

    def answered(claim: Claim) -> Response:
        # claim_named refuses (raises) rather than answer an empty claim.
        assert claim.unit is not None
        assert claim.attempt is not None
        claim_answered(request, claim)
        return answer(UnitAttempt(claim.unit, claim.attempt))

    return await w.run(
        Keying.RERUNNABLE,
        lambda svc: svc.claim_named(unit, w.caller.agent, lease_seconds=w.body.lease_seconds),
        answered,
    )
