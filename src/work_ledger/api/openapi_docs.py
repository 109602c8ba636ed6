"""What the OpenAPI document says that FastAPI cannot see: the bearer token and X-WL-Agent
on every authenticated operation (the `require(...)` dependencies read them by hand), and
Idempotency-Key on every write (`write_of(...)`).

Which dependencies a route takes is read from its endpoint's signature (`Annotated[...,
Depends(...)]`) and its `dependencies=`, with Python's own `inspect`, not from FastAPI's
solved dependency tree.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastapi.params import Depends
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from work_ledger.api.auth import AGENT_HEADER, AUTHENTICATED
from work_ledger.api.writes import IDEMPOTENCY_HEADER, WRITES
from work_ledger.service.idempotency import MAX_KEY_LENGTH

_BEARER_HELP = "A token from `work-ledger token create`."


def _dependencies(route: APIRoute) -> Iterator[Callable[..., Any]]:
    """The callables the route depends on directly (its endpoint's and its own)."""
    for depends in route.dependencies:
        if depends.dependency is not None:
            yield depends.dependency
    for parameter in inspect.signature(route.endpoint, eval_str=True).parameters.values():
        for mark in typing.get_args(parameter.annotation)[1:]:
            if isinstance(mark, Depends) and mark.dependency is not None:
                yield mark.dependency


def document_headers(schema: dict[str, Any], routes: Sequence[BaseRoute]) -> None:
    """Add the bearer scheme, X-WL-Agent and Idempotency-Key to `schema`'s operations."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["HTTPBearer"] = {"type": "http", "scheme": "bearer", "description": _BEARER_HELP}
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        depends = set(_dependencies(route))
        for method in route.methods or ():
            operation = schema["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            parameters = operation.setdefault("parameters", [])
            if depends & AUTHENTICATED:
                operation["security"] = [{"HTTPBearer": []}]
                parameters.append(
                    _header(AGENT_HEADER, 200, "Act as a sub-agent: <principal>/<suffix>.")
                )
            if depends & WRITES:
                parameters.append(
                    _header(
                        IDEMPOTENCY_HEADER,
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
