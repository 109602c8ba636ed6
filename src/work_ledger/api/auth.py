"""Who is calling: the bearer token verified once per request, its role admitted, and the
sub-agent it may act as. (The Idempotency-Key header and the body are read by
api/writes.py's `WriteOf`, which admits its caller through `require` here.)

Role → endpoint matrix (DESIGN §7), as the routes' `require`/`WriteOf` roles say;
`operator` may do everything:

    endpoint                         agent  harness  triage  projector  reader
    GET units, events, questions       ✓      ✓        ✓        ✓         ✓
    GET /budgets                       ·      ✓        ✓        ✓         ✓
    GET /metrics (WL_METRICS_TOKEN)    ✓      ✓        ✓        ✓         ✓
    POST /units (register)             ·      ·        ·        ·         ·
    POST /units/claim, /{unit}/claim   ✓      ·        ·        ·         ·
    POST /attempts/{id}/heartbeat      ✓      ·        ·        ·         ·
    POST /attempts/{id}/cost           ✓      ·        ·        ·         ·
    POST /units/{unit}/transition      ✓      verified only      ·        ·
    POST /units/{unit}/block           ✓      ✓        ·        ·         ·
    POST /units/{unit}/unblock         ·      ·        ✓        ·         ·
    POST /units/{unit}/dispose         ✓      ·        ·        ·         ·
    POST /units/{unit}/split           ✓      ·        ·        ·         ·
    POST /units/{unit}/waive           ·      ·        ·        ·         ·
    POST /budgets                      ·      ·        ·        ·         ·
    POST /questions/{id}/cancel        ✓      ·        ✓        ·         ·
    POST /questions/{id}/route         ·      ·        ✓        ·         ·
    POST /projection/events            ·      ·        ·        ✓         ·

An agent acts as itself (Actor(privileged=False)): the service checks it holds the unit.
Harness is privileged for verify and block, triage for unblock and cancel, operator for
everything. A request may narrow the acting id to a sub-agent with the `X-WL-Agent:
<principal>/<suffix>` header; it can never name another principal.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.api.request_state import state_of
from work_ledger.domain.model import Actor
from work_ledger.errors import Forbidden, RateLimited, Unauthorized
from work_ledger.service.tokens import Principal, Role, TokenStore, token_prefix

AGENT_HEADER = "X-WL-Agent"
_SUFFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")
# The security scheme that `token_doc` names, in the OpenAPI document's components.
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "A token from `work-ledger token create`.",
}


def header_doc(name: str, max_length: int, description: str) -> dict[str, Any]:
    """An optional header, as an OpenAPI parameter."""
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string", "maxLength": max_length},
    }


def token_doc() -> dict[str, Any]:
    """The `openapi_extra` of a route that takes a token (`require`, `WriteOf`): the
    bearer scheme and X-WL-Agent, which `authenticate` reads from the raw headers, where
    FastAPI cannot see them. A new dict each time: FastAPI merges it into the operation."""
    return {
        "security": [{"HTTPBearer": []}],
        "parameters": [header_doc(AGENT_HEADER, 200, "Act as a sub-agent: <principal>/<suffix>.")],
    }


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
    state = state_of(request)
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
    # documented by the route's `openapi_extra=token_doc()`. Declared as FastAPI parameters
    # they were solved and validated on every request, ~10 % of serve's CPU on the claim path.
    async def caller(request: Request) -> Caller:
        found = await authenticate(request)
        if found.role not in allowed:
            raise Forbidden(
                f"a {found.role} token may not {request.method} {request.url.path}; this "
                f"endpoint takes a token with role {names}; ask an operator for one"
            )
        return found

    return caller


def refuse_role(caller: Caller, role: Role, what: str) -> None:
    if caller.role is role:
        raise Forbidden(f"a {role} token may not {what}")


ANY_ROLE = tuple(Role)
Reader = Annotated[Caller, Depends(require(*ANY_ROLE))]
