"""The direct path: a route marked `@direct` is called straight from the edge.

FastAPI declares every route: the OpenAPI document, path and query validation, every
GET. Per request, though, it also runs its exception middleware, walks the route list,
and solves each endpoint's dependencies anew. For the ledger's writes, which run many
times a second, `DirectRoutes` (the innermost middleware, inside the access log, the
metrics and the body limit) does that work once, at start-up: it plans each marked
route's call (the request, the dependencies, which take only the request, and the path
parameters, validated by the route's own fields) and then serves a matching request
with one regex match and one call. Idempotency-Key goes through the same
`IdempotentRoute.run_keyed` as on the FastAPI path. A request it cannot plan for (a
path parameter that fails validation, say) goes down the ordinary FastAPI path, which
answers it as before; both paths answer with the app's own exception handlers.

A route opts in with `@direct` under its `@router.post(...)`; it must read its body with
`wire.json_body` and return a Response (`wire.answer`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from work_ledger.api.deps import IdempotentRoute

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

    `fastapi_app` is the app whose exception handlers answer errors on this path."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        by_method: dict[str, list[_Plan]] = {}
        for route in routes:
            if isinstance(route, APIRoute) and route.endpoint in _DIRECT:
                for method in route.methods or ():
                    by_method.setdefault(method, []).append(_plan(route))
        self._plans = {method: tuple(plans) for method, plans in by_method.items()}

    def plans(self, method: str) -> tuple[_Plan, ...]:
        return self._plans.get(method, ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for plan in self.plans(scope["method"]):
                match = plan.regex.match(scope["path"])
                if match is not None:
                    kwargs = _path_values(plan, match)
                    if kwargs is not None:
                        scope["route"] = plan.route  # for the metrics' route label
                        await self._serve(plan, kwargs, scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    async def _serve(
        self, plan: _Plan, kwargs: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        request = Request(scope, receive, send)

        async def call(request: Request) -> Response:
            for name, dependency in plan.dependencies:
                kwargs[name] = await dependency(request)
            if plan.request_name is not None:
                kwargs[plan.request_name] = request
            return await plan.endpoint(**kwargs)

        try:
            key = request.headers.get("idempotency-key")
            if plan.idempotent and key is not None:
                response = await IdempotentRoute.run_keyed(plan.route.path, request, key, call)
            else:
                response = await call(request)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise  # the server error middleware answers it, as on the FastAPI path
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Any:
        """The app's handler for this kind of error (not the catch-all for Exception)."""
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None
            if cls in self.fastapi_app.exception_handlers:
                return self.fastapi_app.exception_handlers[cls]
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
