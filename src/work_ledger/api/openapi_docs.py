"""What the OpenAPI document says that FastAPI cannot see: the bearer token and X-WL-Agent
on every authenticated operation (the `require(...)` dependencies read them by hand),
Idempotency-Key on every write (`write_of(...)`), the answers that middleware and the
connection layer give (413, 429, 503) with their Retry-After, and `Problem.code` as the
enum of every code the server sends. Generated clients (clients/typescript) read all of it.

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

from work_ledger.api import problems
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


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying the same request (same Idempotency-Key).",
        "schema": {"type": "integer", "minimum": 0},
    }
}
_RETRY_409 = (
    "A ledger invariant refused it (names `invariant`: stop, do not retry), or the first "
    "request under this Idempotency-Key still runs (`invariant` idempotency_key_in_flight, "
    "with Retry-After: retry the same request)"
)
_RETRY_503 = (
    "The database cannot be reached, or the server is at its connection cap: retry after "
    "Retry-After, on another replica if you have one"
)


def document_responses(schema: dict[str, Any]) -> None:
    """413 where a body is read, 429 where a token is checked, 503 everywhere (the
    connection cap answers any route), Retry-After on 429, 503 and 409; `Problem.code` as
    an enum."""
    for operations in schema["paths"].values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "requestBody" in operation:
                responses.setdefault("413", dict(problems.TOO_LARGE[413]))
            if "security" in operation:
                responses.setdefault("429", dict(problems.UNAUTHORIZED[429]))
            responses["503"] = dict(problems.UNAVAILABLE[503], description=_RETRY_503)
            if "409" in responses:
                responses["409"] = dict(responses["409"], description=_RETRY_409)
            for status in ("409", "429", "503"):
                if status in responses:
                    responses[status] = dict(responses[status], headers=_RETRY_AFTER)
    problem = schema["components"]["schemas"]["Problem"]
    problem["properties"]["code"]["enum"] = problems.all_codes()
