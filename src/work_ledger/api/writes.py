"""A route's writes: the request's Idempotency-Key turned into the service's `Key`, and
the service's answers turned into responses.

A route takes `Writes` as its first dependency and calls one method of it, which calls
the service (`service/keyed.py`): `run` with the use case's `Keying`, or `looks` for a
long-poll claim. Without Idempotency-Key the write simply runs. A replay answers the
stored status and body with `Idempotent-Replayed: true`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Request, Response

from work_ledger.api import problems
from work_ledger.api.auth import authenticate
from work_ledger.api.wire import raw_body
from work_ledger.domain.model import Claim
from work_ledger.errors import WorkLedgerError
from work_ledger.service.idempotency import Outcome, check_key, request_hash
from work_ledger.service.keyed import Answer, Key, KeyedWrites, Keying, Look
from work_ledger.service.ledger import Ledger

REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_HEADER = "Idempotency-Key"
T = TypeVar("T")


def outcome_of(response: Response) -> Outcome:
    """What is stored of an answer: its status, content type and body."""
    media_type = response.headers.get("content-type", "application/json")
    return Outcome(response.status_code, media_type, bytes(response.body))


def refusal_outcome(exc: WorkLedgerError) -> Outcome:
    """A refusal as the problem document the exception handler answers with."""
    return outcome_of(problems.error_response(exc))


def _response(answer: Answer) -> Response:
    outcome = answer.outcome
    return Response(
        outcome.body,
        status_code=outcome.status,
        media_type=outcome.content_type,
        headers={REPLAYED_HEADER: "true"} if answer.replayed else None,
    )


@dataclass(frozen=True, slots=True)
class Writes:
    """The service's keyed writes, with this request's key (None: no Idempotency-Key)."""

    service: KeyedWrites
    key: Key | None

    async def run(
        self,
        keying: Keying,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Response],
    ) -> Response:
        """Run `write` once per key, keyed as `keying`; `answer` writes its response."""
        done = await self.service.run(self.key, keying, write, lambda r: outcome_of(answer(r)))
        return _response(done)

    async def looks(
        self,
        wait: Callable[[Look], Awaitable[Claim]],
        answer: Callable[[Claim], Response],
    ) -> Response:
        """A long-poll claim: `wait` looks with the `Look` it is given."""
        done = await self.service.looks(self.key, wait, lambda c: outcome_of(answer(c)))
        return _response(done)


async def writes(request: Request) -> Writes:
    """The request's writes. With Idempotency-Key: the key checked, the caller verified
    (its role and agent scope the key) and the request hashed (a different request under
    the same key is refused)."""
    service: KeyedWrites = request.app.state.writes
    raw = request.headers.get(IDEMPOTENCY_HEADER)
    if raw is None:
        return Writes(service, None)
    key = check_key(raw)
    caller = await authenticate(request)
    body = await raw_body(request)
    digest = request_hash(request.method, request.url.path, request.url.query, body)
    return Writes(service, Key(f"{caller.role}:{caller.agent}", key, digest))


WritesDep = Annotated[Writes, Depends(writes)]
