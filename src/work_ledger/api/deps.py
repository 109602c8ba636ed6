"""Request dependencies: who is calling (auth, roles, sub-agents) and Idempotency-Key.

Role → endpoint matrix (DESIGN §7); `operator` may do everything:

    endpoint                         agent  harness  triage  projector  reader
    GET (units, events, questions)     ✓      ✓        ✓        ✓         ✓
    POST /units (register)             ·      ·        ·        ·         ·
    POST /units/claim, /{unit}/claim   ✓      ·        ·        ·         ·
    POST /attempts/{id}/heartbeat      ✓      ·        ·        ·         ·
    POST /attempts/{id}/cost           ✓      ·        ·        ·         ·
    POST /units/{unit}/transition      ✓      verified only      ·        ·
    POST /units/{unit}/block           ✓      ✓        ·        ·         ·
    POST /units/{unit}/unblock         ·      ·        ✓        ·         ·
    POST /units/{unit}/dispose         ✓      ·        ·        ·         ·
    POST /questions/{id}/cancel        ✓      ·        ✓        ·         ·
    POST /questions/{id}/route         ·      ·        ✓        ·         ·
    POST /projection/events            ·      ·        ·        ✓         ·

An agent acts as itself (Actor(privileged=False)): the service checks it holds the unit.
Harness is privileged for verify and block, triage for unblock and cancel, operator for
everything. A request may narrow the acting id to a sub-agent with the `X-WL-Agent:
<principal>/<suffix>` header; it can never name another principal.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from work_ledger.api import problems
from work_ledger.api.keyed import (
    ClaimLooks,
    Replayed,
    bound_ledger,
    is_decision,
    keys_on,
    replay,
    stored,
)
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.db.store import translated_errors
from work_ledger.domain.model import Actor
from work_ledger.errors import Forbidden, RateLimited, Unauthorized, WorkLedgerError
from work_ledger.service.idempotency import (
    MAX_KEY_LENGTH,
    IdempotencyStore,
    check_key,
    request_hash,
)
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Principal, Role, TokenStore, token_prefix

AGENT_HEADER = "X-WL-Agent"
_SUFFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")
_BEARER_HELP = "A token from `work-ledger token create`."
# The `require(...)` dependencies: the operations that take a token.
AUTHENTICATED: set[Callable[..., Awaitable[Caller]]] = set()


@dataclass(frozen=True, slots=True)
class Caller:
    """The verified token and the agent id it acts as on this request."""

    token: Principal
    agent: str

    @property
    def role(self) -> Role:
        return self.token.role

    def actor(self, *privileged: Role) -> Actor:
        """The service's Actor: privileged for operator and the roles named here."""
        return Actor(self.agent, privileged=self.role in (Role.OPERATOR, *privileged))


# Dependencies are `async def` even when they never await: FastAPI runs a plain `def`
# dependency in a worker thread, a hop that cost ~10% of serve's time on the claim path.
async def ledger(request: Request) -> Ledger:
    """The app's ledger, or the one bound to this request's transaction (idempotent writes)."""
    value: Ledger = _state(request).get("ledger") or request.app.state.ledger
    return value


def _state(request: Request) -> dict[str, Any]:
    """The request's state (what `request.state` reads and writes), as its plain dict: the
    request path reads it a few times per request, without the State wrapper's lookups."""
    state: dict[str, Any] = request.scope.setdefault("state", {})
    return state


def acting_agent(token: Principal, named: str | None) -> str:
    """The token's principal, or `principal/suffix` when the request names a sub-agent."""
    if named is None or named == token.principal:
        return token.principal
    head, sep, suffix = named.partition("/")
    if head != token.principal or not sep or not _SUFFIX.match(suffix):
        raise Forbidden(
            f"this token belongs to {token.principal}; it cannot act as {named[:300]!r}. "
            f"Name a sub-agent as {token.principal}/<suffix> (letters, digits, . _ : @ -), "
            "or drop the X-WL-Agent header"
        )
    return named


async def authenticate(request: Request) -> Caller:
    """Verify the bearer token once per request (cached on the request)."""
    state = _state(request)
    cached: Caller | None = state.get("caller")
    if cached is not None:
        return cached
    authorization, named = _auth_headers(request.scope["headers"])
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "no token: send `Authorization: Bearer wl_<prefix>_<secret>` with a token from "
            "`work-ledger token create --role ROLE --principal NAME`"
        )
    principal = await _verified(request, token.strip())
    caller = Caller(principal, acting_agent(principal, named))
    state["caller"] = caller
    state["principal"] = caller.agent
    return caller


def _auth_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str, str | None]:
    """Authorization ("" when absent) and X-WL-Agent, the first of each, in one pass over
    the raw headers (whose names the server has lower-cased)."""
    authorization: bytes | None = None
    named: bytes | None = None
    for name, value in headers:
        if name == b"authorization" and authorization is None:
            authorization = value
        elif name == b"x-wl-agent" and named is None:
            named = value
    return (
        "" if authorization is None else authorization.decode("latin-1"),
        None if named is None else named.decode("latin-1"),
    )


async def _verified(request: Request, token: str) -> Principal:
    """The token's principal: from the cache, else looked up unless this client has
    failed too often with this token's prefix (429)."""
    tokens: TokenStore = request.app.state.tokens
    found = tokens.cached(token)
    if found is not None:
        return found
    limiter: FailureLimiter = request.app.state.auth_failures
    client = request.client.host if request.client is not None else ""
    # Counted per address and prefix: a fleet's agents often share one host's address, and
    # one of them retrying a revoked token in a loop must not lock the others out.
    prefix = token_prefix(token)
    wait = limiter.retry_after((client, prefix))
    if wait:
        which = f"token wl_{prefix}_…" if prefix else "tokens that are not work-ledger tokens"
        raise RateLimited(
            f"too many failed authentications from {client} with {which}; wait {wait} s "
            "(Retry-After) and send a valid token from `work-ledger token create`",
            extra={"retry_after": wait},
        )
    try:
        return await tokens.verify(token)
    except Unauthorized:
        limiter.failed((client, prefix))
        raise


def require(*roles: Role) -> Callable[..., Awaitable[Caller]]:
    """A dependency admitting the given roles (and operator)."""
    allowed = frozenset((*roles, Role.OPERATOR))
    names = ", ".join(sorted(r.value for r in allowed))

    # Only the request: the bearer token and X-WL-Agent are read by `authenticate`, and
    # documented by `document_headers`. Declared as FastAPI parameters they were solved and
    # validated on every request, ~10 % of serve's CPU on the claim path (bench/RESULTS.md).
    async def caller(request: Request) -> Caller:
        found = await authenticate(request)
        if found.role not in allowed:
            raise Forbidden(
                f"a {found.role} token may not {request.method} {request.url.path}; this "
                f"endpoint takes a token with role {names}; ask an operator for one"
            )
        return found

    AUTHENTICATED.add(caller)
    return caller


def refuse_role(caller: Caller, role: Role, what: str) -> None:
    if caller.role is role:
        raise Forbidden(f"a {role} token may not {what}")


ANY_ROLE = tuple(Role)
Reader = Annotated[Caller, Depends(require(*ANY_ROLE))]


def document_headers(schema: dict[str, Any], routes: list[Any]) -> None:
    """Add to the OpenAPI schema what the dependencies read by hand: the bearer token and
    X-WL-Agent on every authenticated operation, Idempotency-Key on every write."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["HTTPBearer"] = {"type": "http", "scheme": "bearer", "description": _BEARER_HELP}
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        for method in route.methods or ():
            operation = schema["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            parameters = operation.setdefault("parameters", [])
            if any(d.call in AUTHENTICATED for d in route.dependant.dependencies):
                operation["security"] = [{"HTTPBearer": []}]
                parameters.append(
                    _header(AGENT_HEADER, 200, "Act as a sub-agent: <principal>/<suffix>.")
                )
            if method == "POST" and isinstance(route, IdempotentRoute):
                parameters.append(
                    _header(
                        "Idempotency-Key",
                        MAX_KEY_LENGTH,
                        "Retry-safe writes: a replay returns the first outcome, unchanged.",
                    )
                )


def _header(name: str, max_length: int, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string", "maxLength": max_length},
    }


Handler = Callable[[Request], Coroutine[Any, Any, Response]]

# A projected event already recorded is a duplicate, so re-running a projection batch has
# no second effect; it runs one transaction per event, so it reserves its key apart.
# A long-poll claim looks for a unit in one keyed transaction per look (api/keyed.py).
# Every other write (a claim that does not wait included) reserves its key, runs and
# stores its outcome in one transaction: all three commit, or none.
# Re-running a claim returns the unit already held: an unfinished reservation of one (left
# by an older server) is taken over, not refused.
APART_PATHS = frozenset({"/projection/events"})
LONG_POLL_PATHS = frozenset({"/units/claim"})
CLAIM_PATHS = frozenset({"/units/claim", "/units/{unit:path}/claim"})


class IdempotentRoute(APIRoute):
    """A route whose POSTs honour Idempotency-Key: reserve, run once, store, replay."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        if "POST" not in (self.methods or ()):
            return handler

        async def idempotent(request: Request) -> Response:
            key = request.headers.get("idempotency-key")
            if key is None:
                return await handler(request)
            return await self.run_keyed(self.path, request, key, handler)

        return idempotent

    @staticmethod
    async def run_keyed(path: str, request: Request, key: str, handler: Handler) -> Response:
        """Run `handler` for a write to `path` carrying Idempotency-Key `key`."""
        key = check_key(key)
        if path in APART_PATHS:
            return await _run_apart(request, key, handler)
        if path in LONG_POLL_PATHS and _wait_seconds(await request.body()) > 0:
            return await _run_looks(request, key, handler)
        return await _run_atomic(request, key, handler, rerunnable=path in CLAIM_PATHS)


async def _keyed(request: Request) -> tuple[str, bytes, bytes]:
    """The caller's scope, the request body and its hash."""
    caller = await authenticate(request)
    body = await request.body()
    digest = request_hash(request.method, request.url.path, request.url.query, body)
    return f"{caller.role}:{caller.agent}", body, digest


class _RollBack(Exception):
    """Leave the transaction without committing, answering `response`."""

    def __init__(self, response: Response) -> None:
        self.response = response


async def _run_atomic(
    request: Request, key: str, handler: Handler, *, rerunnable: bool
) -> Response:
    """Reserve, write and store the outcome in one transaction on one connection.

    A concurrent duplicate's reservation waits on ours and then finds our outcome; a
    crash rolls everything back, so the retry runs as if for the first time. A database
    that cannot be reached (acquire, commit) is a 503, as everywhere."""
    scope, _, digest = await _keyed(request)
    base: Ledger = request.app.state.ledger
    try:
        async with translated_errors(), base.store.pool.acquire() as conn, conn.transaction():
            keys = keys_on(conn)
            reservation = await keys.reserve(scope, key, digest, rerunnable=rerunnable)
            if reservation.outcome is not None:
                raise _RollBack(replay(reservation.outcome))
            request.state.ledger = bound_ledger(base, conn)
            response = await _outcome_of(handler, request)
            if not is_decision(response.status_code):
                raise _RollBack(response)  # it ran nothing: free the key
            await keys.complete(scope, key, stored(response))
            return response
    except _RollBack as rolled_back:
        return rolled_back.response


async def _run_looks(request: Request, key: str, handler: Handler) -> Response:
    """A long-poll claim: each look for a unit is a keyed transaction (api/keyed.py)."""
    scope, _, digest = await _keyed(request)
    looks = ClaimLooks(request.app.state.ledger, scope, key, digest)
    request.state.ledger = looks.ledger()
    try:
        return await looks.finish(await _outcome_of(handler, request))
    except Replayed as earlier:
        return replay(earlier.outcome)
    finally:
        await looks.close()


async def _run_apart(request: Request, key: str, handler: Handler) -> Response:
    """Reserve the key, run the request, then store its outcome (projection batches)."""
    scope, _, digest = await _keyed(request)
    store: IdempotencyStore = request.app.state.idempotency
    reservation = await store.reserve(scope, key, digest, rerunnable=True)
    if reservation.outcome is not None:
        return replay(reservation.outcome)
    try:
        response = await _outcome_of(handler, request)
    except BaseException:
        await _release_quietly(store, scope, key)
        raise
    if not is_decision(response.status_code):
        await _release_quietly(store, scope, key)
        return response
    await store.complete(scope, key, stored(response))
    return response


def _wait_seconds(body: bytes) -> float:
    """How long a long-poll write may wait (its `wait_seconds`, at most 60)."""
    try:
        value = json.loads(body).get("wait_seconds", 0) if body else 0
    except (ValueError, AttributeError):
        value = 0
    return float(value) if isinstance(value, int) and 0 <= value <= 60 else 0.0


async def _outcome_of(handler: Handler, request: Request) -> Response:
    try:
        return await handler(request)
    except WorkLedgerError as exc:
        if exc.unit_id is not None:
            request.state.unit_id = exc.unit_id
        return problems.error_response(exc)
    except RequestValidationError as exc:
        return problems.validation_response(exc)
    except StarletteHTTPException as exc:
        return problems.http_response(exc)


async def _release_quietly(store: IdempotencyStore, scope: str, key: str) -> None:
    # If even this fails, the retry takes the unfinished reservation over.
    with contextlib.suppress(Exception):
        await store.release(scope, key)


def unit_logged(request: Request, unit_id: Any) -> None:
    """Name the unit in this request's access log line."""
    _state(request)["unit_id"] = str(unit_id)
