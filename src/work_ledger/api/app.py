"""The ASGI application: a small factory that wires state and includes one router per group.

To add endpoints, write a router module under `api/routes/` (or beside this file) and add
it to `routers` below.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from work_ledger.api import mcp_http, metrics, problems, wire
from work_ledger.api.access_log import AccessLogMiddleware
from work_ledger.api.auth import BEARER_SCHEME
from work_ledger.api.body_limit import BodyLimitMiddleware
from work_ledger.api.longpoll import Notifier
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.api.routes import (
    attempts,
    budgets,
    bulk,
    claims,
    controls,
    events,
    health,
    otlp,
    projection,
    questions,
    shape,
    units,
)
from work_ledger.api.writes import body_models, refusal_outcome
from work_ledger.config import Settings
from work_ledger.db.connect import resolve_database_url
from work_ledger.readside.pool import read_pool
from work_ledger.runtime import open_ledger
from work_ledger.service.idempotency import IdempotencyStore
from work_ledger.service.keyed import KeyedWrites
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import (
    OPERATOR_TOKEN_FILE,
    Role,
    TokenStore,
    first_operator_from_file,
    load_secret,
    write_private,
)

log = structlog.get_logger("work_ledger.api")

EXPIRE_EVERY_SECONDS = 600.0
# How serve folds the read summaries' change rows (migration 0017): each second when at
# least FOLD_MIN_ROWS wait (a fold's cost per key it touches is spread over that many
# changes), and every FOLD_ALWAYS_TICKS-th second whatever waits. The views are exact
# either way; this bounds how many unfolded rows a read adds up.
FOLD_EVERY_SECONDS = 1.0
FOLD_MIN_ROWS = 1000
FOLD_ALWAYS_TICKS = 10


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def _guard_tokens(app: FastAPI, tokens: TokenStore, settings: Settings, host: str) -> None:
    """No tokens yet: store WL_OPERATOR_TOKEN_FILE's as the first operator's; else refuse
    a non-loopback bind, and on loopback mint the first operator token."""
    if await first_operator_from_file(tokens, settings.operator_token_file):
        print(
            f"No API token existed: stored the operator token of {settings.operator_token_file} "
            "(WL_OPERATOR_TOKEN_FILE)",
            flush=True,
        )
    if await tokens.count_live() > 0:
        return
    if not is_loopback(host):
        raise SystemExit(
            f"refusing to serve on {host}: no API token exists yet, so anyone could reach an "
            "unprotected ledger. Run `work-ledger token create --role operator --principal "
            "NAME` first, or serve on 127.0.0.1 once to mint the first operator token."
        )
    if app.state.bootstrap:
        minted = await tokens.create_first(Role.OPERATOR, "operator")
        if minted is None:
            return  # a replica started at the same time minted it
        token, _ = minted
        path = settings.home / OPERATOR_TOKEN_FILE
        write_private(path, token)
        print(
            f"No API token existed: minted an operator token, saved 0600 to {path} "
            "(read it from that file; it is never printed or logged)",
            flush=True,
        )


# The two housekeeping loops go on after a failure (the database away a moment, a
# failover): the next round tries again. Each failure is logged, since nothing else would
# tell: idempotency keys kept past their expiry, or views exact but slower to read.
async def _expire_idempotency(store: IdempotencyStore) -> None:
    while True:
        try:
            await store.expire()
        except Exception as exc:
            log.warning("idempotency_expiry_failed", error=f"{type(exc).__name__}: {exc}")
        await asyncio.sleep(EXPIRE_EVERY_SECONDS)


async def _fold_read_summaries(ledger: Ledger) -> None:
    tick = 0
    while True:
        await asyncio.sleep(FOLD_EVERY_SECONDS)
        tick += 1
        least = 0 if tick % FOLD_ALWAYS_TICKS == 0 else FOLD_MIN_ROWS
        try:
            await ledger.store.fetchrow("fold_read_summaries", least)
        except Exception as exc:
            log.warning("read_summary_fold_failed", error=f"{type(exc).__name__}: {exc}")


def _is_write(route: BaseRoute) -> bool:
    return isinstance(route, APIRoute) and "POST" in (route.methods or ())


def create_app(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    bootstrap: bool = False,
    max_connections: int | None = None,
    auth_failures: FailureLimiter | None = None,
    migrate: bool = True,
) -> FastAPI:
    """The API over `settings.database_url` (or the embedded server); `migrate=False`
    (serve --no-migrate) refuses a ledger that lacks a migration instead of applying it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = await resolve_database_url(settings)
        async with (
            open_ledger(
                settings,
                url=url,
                max_connections=max_connections or settings.pool_size,
                migrate=migrate,
            ) as ledger,
            read_pool(settings, ledger.store.pool) as reads,
        ):
            tokens = TokenStore(ledger.store, load_secret(settings.secret, settings.home))
            await _guard_tokens(app, tokens, settings, host)
            # LISTEN needs a session of its own: never a transaction pooler's (open_ledger
            # proved this URL hears its own NOTIFY).
            notifier = Notifier(settings.direct_database_url or url)
            await notifier.start()
            idempotency = IdempotencyStore(ledger.store)
            expiry = asyncio.create_task(_expire_idempotency(idempotency))
            folding = asyncio.create_task(_fold_read_summaries(ledger))
            app.state.ledger, app.state.tokens, app.state.read_pool = ledger, tokens, reads
            app.state.notifier, app.state.idempotency = notifier, idempotency
            app.state.writes = KeyedWrites(ledger, refusal_outcome)
            try:
                async with app.state.mcp.running(ledger):
                    # What start-up built (the app, its schemas, the pools) lives as long as
                    # the process: out of the collector's sight, so that a full collection
                    # under load does not walk it again each time (at 64 clients serve's
                    # CPU per claim+start fell from 1.9x to 1.2x of e79fe15's,
                    # bench/results/ab-path-20261201.md).
                    gc.collect()
                    gc.freeze()
                    yield
            finally:
                for task in (expiry, folding):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await notifier.stop()

    app = FastAPI(
        title="work-ledger",
        version="0.1.0",
        description="The durable accounting ledger for fleets of AI coding agents. "
        "Errors are RFC 9457 application/problem+json.",
        lifespan=lifespan,
        # Swagger UI loads its assets from a CDN: off unless asked for (WL_DOCS=1).
        docs_url="/docs" if settings.docs else None,
        redoc_url=None,
        # No OpenTelemetry here: /metrics and the access log are the ledger's telemetry,
        # and a disabled exporter still cost a check per request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.auth_failures = auth_failures or FailureLimiter()
    app.state.bootstrap = bootstrap
    problems.install(app)
    # events before units, whose /units/{unit} would otherwise take /units/{unit}/events.
    # bulk before units, too: POST /units/bulk is no unit's path.
    routers = (
        health,
        events,
        claims,
        attempts,
        bulk,
        units,
        shape,
        questions,
        projection,
        budgets,
        controls,
        otlp,
    )
    # The routes themselves, not `include_router`: FastAPI matches an included router's
    # routes through a wrapper of its own, twice per request, ~10 % of a write's CPU
    # (bench/results/ab-path-20261201.md). The routes already carry their router's tags
    # and responses. Writes first, each kind in the order above: Starlette tries the routes
    # in turn, and an agent's requests are writes (a claim was tried after 5 routes, a
    # heartbeat after 17). A read's route never takes a write, whatever their order.
    routes = [route for module in routers for route in module.router.routes]
    app.router.routes.extend(sorted(routes, key=lambda route: not _is_write(route)))
    app.state.mcp = mcp_http.mount(app)  # MCP over Streamable HTTP at /mcp
    # Outermost last: the metrics time the whole request, the access line follows its
    # answer, and the body limit stands in front of the routes.
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AccessLogMiddleware)
    metrics.install(app, token=settings.metrics_token)

    def openapi() -> dict[str, Any]:
        """FastAPI's document, with the components that the routes' `openapi_extra` refers
        to (the bearer scheme, the problem, the write bodies) and what the middleware
        answers (problems.document_middleware_answers)."""
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["HTTPBearer"] = BEARER_SCHEME
            models = components.setdefault("schemas", {})
            models["Problem"] = problems.Problem.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            models.update(wire.body_schemas(body_models(routers)))
            problems.document_middleware_answers(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
