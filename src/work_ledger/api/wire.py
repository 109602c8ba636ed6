"""The request path's codec: a body decoded once, straight from bytes to its typed model,
and an answer encoded once, straight from its type to bytes.

A write reads its body with `json_body` (in `api/writes.WriteOf`) once its caller is
authenticated, so an anonymous request is refused before its body is read or parsed. The
route documents the body with `openapi_extra=READER.doc()` (api/writes.py) and the
answer with `response_model=`, the answer's type, and returns `answer(value)`: the bytes
that type's own serializer writes, so FastAPI neither validates the answer a second time
nor re-encodes it.

Nesting: the JSON parser refuses a document nested deeper than `MAX_JSON_DEPTH` levels
(its own fixed limit, without recursion); the 422 names the field where it happened,
found by `_deep_path`, a loop over the document's brackets. A free-form field
(`FreeJson`) nests at most `MAX_FREE_DEPTH` levels, counted by `_depth`, a loop too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, TypeAdapter, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.requests import ClientDisconnect

from work_ledger.errors import InvalidInput

MAX_JSON_DEPTH = 200  # pydantic-core's JSON parser (jiter) refuses deeper documents
MAX_FREE_DEPTH = 32
JSON_MEDIA_TYPE = "application/json"
M = TypeVar("M", bound=BaseModel)
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],]')


async def raw_body(request: Request) -> bytes:
    """The request's body bytes (read once: Starlette keeps them on the request)."""
    try:
        return await request.body()
    except ClientDisconnect:
        raise InvalidInput(
            "the request body ended before its Content-Length; send it whole"
        ) from None


async def json_body(request: Request, model: type[M]) -> M:
    """The request body as `model`, or a 422 naming each invalid field."""
    raw = await raw_body(request)
    if not raw:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": "Field required", "type": "missing"}]
        )
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(_errors(exc, raw)) from None


def body_schemas(models: Iterable[type[BaseModel]]) -> dict[str, Any]:
    """The JSON schemas of the body models (and the models they nest), by name."""
    _, schemas = models_json_schema(
        [(model, "validation") for model in models],
        ref_template="#/components/schemas/{model}",
    )
    found: dict[str, Any] = schemas.get("$defs", {})
    return found


# Each answer type's serializer (pydantic's, for a wire model or a dataclass of the
# ledger's records), built on that type's first answer and kept: building one costs
# as much as writing some 400 answers.
_WRITERS: dict[type[Any], Callable[[Any], bytes]] = {}


def answer(value: Any, status_code: int = 200) -> Response:
    """The response: `value` as JSON, written by its type's serializer, encoded once."""
    kind = type(value)
    write = _WRITERS.get(kind)
    if write is None:
        write = _WRITERS[kind] = TypeAdapter(kind).dump_json
    return Response(write(value), status_code=status_code, media_type=JSON_MEDIA_TYPE)


def _errors(exc: ValidationError, raw: bytes) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        if error["type"] == "json_invalid" and "recursion limit" in error["msg"]:
            errors.append(
                {
                    "loc": ("body", *_deep_path(raw)),
                    "msg": f"nested deeper than {MAX_JSON_DEPTH} levels; free-form fields "
                    f"nest at most {MAX_FREE_DEPTH}: flatten it",
                    "type": "json_too_deep",
                }
            )
        else:
            errors.append({**error, "loc": ("body", *error["loc"])})
    return errors


def _deep_path(raw: bytes, shown: int = 8) -> list[str | int]:
    """The keys and indexes leading to where `raw` first nests `MAX_JSON_DEPTH` deep (the
    first `shown` of them): one pass over its brackets, commas and strings, no recursion."""
    frames: list[list[Any]] = []  # per open container: [is_object, key or index, expecting key]
    for match in _TOKENS.finditer(raw.decode("utf-8", "replace")):
        token = match.group()
        top = frames[-1] if frames else None
        if token in "{[":
            if len(frames) + 1 >= MAX_JSON_DEPTH:
                break
            frames.append([token == "{", None if token == "{" else 0, token == "{"])
        elif token in "}]":
            if frames:
                frames.pop()
        elif token == ",":
            if top is not None:
                if top[0]:
                    top[2] = True
                else:
                    top[1] += 1
        elif top is not None and top[0] and top[2]:
            top[1], top[2] = json.loads(token)[:64], False
    return [frame[1] for frame in frames[:shown] if frame[1] is not None]


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar is 0): a loop over an explicit stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_FREE_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _bounded(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value) > MAX_FREE_DEPTH:
        raise ValueError(f"nests deeper than {MAX_FREE_DEPTH} levels; flatten it")
    return value


FreeJson = Annotated[dict[str, Any], AfterValidator(_bounded)]
