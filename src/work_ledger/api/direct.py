"""The direct path: a route marked `@direct` is called straight from the server.

FastAPI declares every route: the OpenAPI document, path and query validation, every
GET. Per request, though, a request also passes Starlette's error middleware, FastAPI's
body limit, the metrics and access-log middlewares and FastAPI's exception middleware,
then a walk of the route list and the solving of the endpoint's dependencies. For the
ledger's writes, which run many times a second, `DirectRoutes` stands in front of all
of that (`LedgerApp` puts it outside the middleware stack) and does the work once, at
start-up: it plans each marked route's call (the request, the dependencies, which take
only the request, and the path parameters, validated by the route's own fields) and
then serves a matching request with one regex match and one call, doing itself what the
skipped layers did for it: the body limit, the request metrics and the access line.
Idempotency-Key goes through the same `IdempotentRoute.run_keyed` as on the FastAPI
path. A request it cannot plan for (a path parameter that fails validation, say) goes
down the ordinary stack, which answers it as before; both paths answer with the app's
own exception handlers.

A route opts in with `@direct` under its `@router.post(...)`; it must read its body with
`wire.json_body` and return a Response (`wire.answer`, `wire.answer_as`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from work_ledger.api.collectors import LedgerMetrics
from work_ledger.api.deps import IdempotentRoute
from work_ledger.api.middleware import (
    MAX_BODY_BYTES,
    declared_length,
    limited,
    log_request,
    too_large,
)
from work_ledger.api.problems import PROBLEM_MEDIA_TYPE

Endpoint = Callable[..., Awaitable[Response]]
F = TypeVar("F", bound=Callable[..., Any])
_DIRECT: set[Callable[..., Any]] = set()


def direct(endpoint: F) -> F:
    """Serve this route on the direct path (see the module docstring)."""
    _DIRECT.add(endpoint)
    return endpoint


@dataclass(frozen=True, slots=True)
class _Plan:
    route: APIRoute
    regex: re.Pattern[str]
    endpoint: Endpoint
    request_name: str | None
    dependencies: tuple[tuple[str, Callable[[Request], Awaitable[Any]]], ...]
    path_params: tuple[tuple[str, Any], ...]  # name, the route's own ModelField
    idempotent: bool


def _plan(route: APIRoute) -> _Plan:
    dependant = route.dependant
    dependencies = []
    for sub in dependant.dependencies:
        extra = sub.path_params or sub.query_params or sub.header_params or sub.body_params
        if sub.call is None or sub.name is None or extra or sub.dependencies:
            raise TypeError(f"{route.path}: a direct route's dependencies take only the request")
        dependencies.append((sub.name, sub.call))
    if dependant.query_params or dependant.header_params or dependant.body_params:
        raise TypeError(f"{route.path}: a direct route reads its body with wire.json_body")
    return _Plan(
        route=route,
        regex=route.path_regex,
        endpoint=route.endpoint,
        request_name=dependant.request_param_name,
        dependencies=tuple(dependencies),
        path_params=tuple((field.name, field) for field in dependant.path_params),
        idempotent=isinstance(route, IdempotentRoute),
    )


class DirectRoutes:
    """Serves the `@direct` ones of `routes` (in order); passes the rest on to `app`.

    It wraps the whole app (see `LedgerApp`), so a direct request does here what the
    layers it skips would do: the body limit, the metrics and the access line.
    `fastapi_app` is the app whose exception handlers answer errors on this path."""

    def __init__(
        self,
        app: ASGIApp,
        fastapi_app: FastAPI,
        routes: Sequence[BaseRoute],
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.max_body = max_body
        by_method: dict[str, list[_Plan]] = {}
        for route in routes:
            if isinstance(route, APIRoute) and route.endpoint in _DIRECT:
                for method in route.methods or ():
                    by_method.setdefault(method, []).append(_plan(route))
        self._plans = {method: tuple(plans) for method, plans in by_method.items()}
        self._observed = _Observed(getattr(fastapi_app.state, "metrics", None))

    def plans(self, method: str) -> tuple[_Plan, ...]:
        return self._plans.get(method, ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for plan in self.plans(scope["method"]):
                match = plan.regex.match(scope["path"])
                if match is not None:
                    kwargs = _path_values(plan, match)
                    if kwargs is not None:
                        await self._timed(plan, kwargs, scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    async def _timed(
        self, plan: _Plan, kwargs: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        started = time.perf_counter()
        response: Response | None = None
        try:
            if declared_length(scope) > self.max_body:
                response = too_large(self.max_body)
            else:
                bounded = limited(receive, self.max_body)
                try:
                    response = await self._answer(plan, kwargs, scope, bounded, send)
                except _Failed as failed:
                    # Answered 500 as the server error middleware would, then raised on for
                    # the server to log, as that middleware does.
                    response = failed.response
                    await response(scope, receive, send)
                    raise failed.error from None
            await response(scope, receive, send)
        finally:
            self._observed(
                plan.route.path, scope["method"], response, time.perf_counter() - started
            )
            log_request(scope, 500 if response is None else response.status_code, started)

    async def _answer(
        self, plan: _Plan, kwargs: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> Response:
        request = Request(scope, receive, send)

        async def call(request: Request) -> Response:
            for name, dependency in plan.dependencies:
                kwargs[name] = await dependency(request)
            if plan.request_name is not None:
                kwargs[plan.request_name] = request
            return await plan.endpoint(**kwargs)

        try:
            key = _idempotency_key(scope) if plan.idempotent else None
            if key is not None:
                return await IdempotentRoute.run_keyed(plan.route.path, request, key, call)
            return await call(request)
        except Exception as exc:
            handlers: dict[Any, Any] = self.fastapi_app.exception_handlers
            cls = next(c for c in type(exc).__mro__ if c in handlers or c is Exception)
            response: Response = await handlers[cls](request, exc)
            if cls is Exception:
                raise _Failed(response, exc) from exc
            return response


class _Failed(Exception):
    """An unexpected error, and the 500 problem that answers it."""

    def __init__(self, response: Response, error: Exception) -> None:
        self.response = response
        self.error = error


class _Observed:
    """A direct request's metrics, recorded as `MetricsMiddleware` records the others',
    each labelled latency series looked up once rather than per request."""

    def __init__(self, metrics: LedgerMetrics | None) -> None:
        self.metrics = metrics
        self._series: dict[tuple[str, str, int], Any] = {}

    def __call__(self, route: str, method: str, response: Response | None, seconds: float) -> None:
        if self.metrics is None:
            return
        status = 500 if response is None else response.status_code
        series = self._series.get((method, route, status))
        if series is None:
            series = self.metrics.request_duration.labels(method, route, str(status))
            self._series[(method, route, status)] = series
        series.observe(seconds)
        if response is None:
            return
        if (response.media_type or "").startswith(PROBLEM_MEDIA_TYPE):
            self.metrics.observe_problem(bytes(response.body))
        elif status == 200 and method == "POST" and route.endswith("/claim"):
            self.metrics.observe_claim(bytes(response.body))


def _idempotency_key(scope: Scope) -> str | None:
    """The first Idempotency-Key header, read from the raw headers (no Headers object)."""
    for name, value in scope["headers"]:
        if name == b"idempotency-key":
            return str(value.decode("latin-1"))
    return None


def _path_values(plan: _Plan, match: re.Match[str]) -> dict[str, Any] | None:
    """The path parameters, validated by the route's fields; None if any is invalid."""
    values: dict[str, Any] = {}
    for name, field in plan.path_params:
        raw = plan.route.param_convertors[name].convert(match.group(name))
        value, errors = field.validate(raw, loc=("path", name))
        if errors:
            return None
        values[name] = value
    return values
