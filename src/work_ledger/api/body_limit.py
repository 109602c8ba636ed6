"""The 1 MiB body limit, as pure ASGI middleware.

The body is not read here: a declared Content-Length over the limit is answered 413
problem+json at once, and a body streamed past it raises PayloadTooLarge from `receive`
(answered 413 by the app's handler), so a route reads its body only after authenticating
the caller.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from work_ledger.api.problems import problem_response
from work_ledger.errors import PayloadTooLarge

MAX_BODY_BYTES = 1 << 20
_TOO_LARGE = (
    "the request body is over {limit} bytes; send at most 1000 units per batch and "
    "evidence as links, never payloads"
)


def too_large(limit: int) -> Response:
    """The 413 problem for a body over `limit` bytes."""
    return problem_response(
        413, "payload_too_large", "Request body too large", _TOO_LARGE.format(limit=limit)
    )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif declared_length(scope) > self.max_body:
            await too_large(self.max_body)(scope, receive, send)
        else:
            await self.app(scope, limited(receive, self.max_body), send)


def declared_length(scope: Scope) -> int:
    """The request's Content-Length (0 when absent or not a number)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def limited(receive: Receive, limit: int) -> Receive:
    """`receive`, refusing a body that streams past `limit` bytes."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise PayloadTooLarge(_TOO_LARGE.format(limit=limit))
        return message

    return counted
