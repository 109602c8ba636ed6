"""A route's writes: the request's Idempotency-Key turned into the service's `Key`, and
the service's answers turned into responses.

A write route names its reader once, beside it: `CLAIM_NEXT = WriteOf(ClaimIn,
Role.AGENT)`. The decorator documents it (`openapi_extra=CLAIM_NEXT.doc()`) and the
endpoint's first line reads it (`w = await CLAIM_NEXT(request)`): its caller, its typed
body and its key. It calls one method of that `Write`, which calls the service
(`service/keyed.py`): `run` with the use case's `Keying`, or `looks` for a long-poll
claim. Without Idempotency-Key the write simply runs. A replay answers the stored status
and body with `Idempotent-Replayed: true`.

The reader is called by the endpoint, not declared as a FastAPI dependency: FastAPI
solves a dependency with a second pass over every kind of parameter, 6 % of a
claim+start's instructions in process (bench/RESULTS.md). What it reads by hand (the
token, X-WL-Agent, Idempotency-Key, the body), FastAPI cannot see: `doc()` says it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

from fastapi import Request, Response
from pydantic import BaseModel

from work_ledger.api import problems
from work_ledger.api.auth import Caller, header_doc, require, token_doc
from work_ledger.api.wire import JSON_MEDIA_TYPE, json_body, raw_body
from work_ledger.domain.model import Claim
from work_ledger.errors import WorkLedgerError
from work_ledger.service.idempotency import MAX_KEY_LENGTH, Outcome, check_key, request_hash
from work_ledger.service.keyed import Answer, Key, KeyedWrites, Keying, Look
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_HEADER = "Idempotency-Key"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


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
class Write(Generic[M]):
    """A write request: its verified caller, its body, its key (None: no Idempotency-Key)
    and the service that runs it."""

    caller: Caller
    body: M
    key: Key | None
    service: KeyedWrites

    async def run(
        self,
        keying: Keying,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Response],
    ) -> Response:
        """Run `write` once per key, keyed as `keying`; `answer` writes its response."""
        if self.key is None:
            return answer(await write(self.service.ledger))
        done = await self.service.run(self.key, keying, write, lambda r: outcome_of(answer(r)))
        return _response(done)

    async def looks(
        self,
        wait: Callable[[Look], Awaitable[Claim]],
        answer: Callable[[Claim], Response],
    ) -> Response:
        """A long-poll claim: `wait` looks with the `Look` it is given."""
        if self.key is None:
            return answer(await wait(self.service.ledger.claim))
        done = await self.service.looks(self.key, wait, lambda c: outcome_of(answer(c)))
        return _response(done)


class WriteOf(Generic[M]):
    """The reader of a write route taking a `model` body from a caller with one of `roles`
    (or operator). Called with the request, in order: Idempotency-Key checked (422), the
    caller verified and admitted (401, 429, 403), the body parsed (422), the request
    hashed (a different request under the same key is refused)."""

    def __init__(self, model: type[M], *roles: Role) -> None:
        self.model = model
        self._admitted = require(*roles)

    def doc(self) -> dict[str, Any]:
        """The route's `openapi_extra`: the token (`token_doc`), Idempotency-Key and the
        body, none of which FastAPI sees. A new dict each time: FastAPI merges it."""
        doc = token_doc()
        doc["parameters"].append(
            header_doc(
                IDEMPOTENCY_HEADER,
                MAX_KEY_LENGTH,
                "Retry-safe writes: a replay returns the first outcome, unchanged.",
            )
        )
        ref = {"$ref": f"#/components/schemas/{self.model.__name__}"}
        doc["requestBody"] = {"required": True, "content": {JSON_MEDIA_TYPE: {"schema": ref}}}
        return doc

    async def __call__(self, request: Request) -> Write[M]:
        raw = request.headers.get(IDEMPOTENCY_HEADER)
        key = None if raw is None else check_key(raw)
        caller = await self._admitted(request)
        body = await json_body(request, self.model)
        service: KeyedWrites = request.app.state.writes
        if key is None:
            return Write(caller, body, None, service)
        url = request.url
        digest = request_hash(request.method, url.path, url.query, await raw_body(request))
        return Write(caller, body, Key(f"{caller.role}:{caller.agent}", key, digest), service)


def body_models(modules: Iterable[ModuleType]) -> list[type[BaseModel]]:
    """The body models that the route modules' writes read (their `WriteOf` readers): the
    components that `doc()`'s references point to."""
    return [
        reader.model
        for module in modules
        for reader in vars(module).values()
        if isinstance(reader, WriteOf)
    ]
