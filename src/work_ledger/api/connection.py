"""Limits before work, per connection: header size, read deadlines, idle keep-alive, and a
cap on concurrent connections (with descriptors enough for it: `raise_open_files`).

uvicorn's httptools protocol has the idle keep-alive timeout and a concurrency cap (503),
but no header size limit and no deadline for reading a request: a client that sends half a
header, or half a body, holds its connection (and what it sent) for ever. `limited(...)`
is that protocol with the missing limits, passed to uvicorn as `http=`:

- the request line and headers over `max_head_bytes` are answered 431 and the connection
  closed, before any of it reaches the app;
- the request line and headers must arrive within `head_seconds` of the connection opening
  or of the previous response (a connection that sends nothing is closed then too);
- a body must arrive whole within `body_seconds` of its headers, or the connection is
  closed (the route reading it sees a disconnect).
"""

from __future__ import annotations

import asyncio
import json
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from work_ledger.api.problems import PROBLEM_MEDIA_TYPE, problem_body


@dataclass(frozen=True)
class Limits:
    max_head_bytes: int = 16 * 1024
    head_seconds: float = 10.0
    body_seconds: float = 20.0
    # Longer than the clients' own idle expiry (httpx 5 s, the SDK's; Node's fetch 4 s): a
    # client then never reuses a connection the server is closing at that moment (a
    # ReadError and a retry; a fleet's heartbeats every 5 s hit it dozens of times a
    # minute). The head deadline closes an idle connection after `head_seconds` anyway.
    keep_alive_seconds: int = 10
    max_connections: int = 2048


# Descriptors beyond the clients' own: the pool, the listener, log and data files.
SPARE_FILES = 256


def raise_open_files(limits: Limits = Limits()) -> tuple[int, int]:
    """Lift this process's soft limit on open descriptors (often 1,024) towards its hard
    limit, so that `limits.max_connections` clients fit: past the soft limit, accepting a
    connection fails (EMFILE) and the server stops accepting, long before its own cap
    answers 503. Never lowers it. The (needed, soft limit now) pair."""
    needed = limits.max_connections + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return needed, soft


def server_options(limits: Limits = Limits()) -> dict[str, Any]:
    """uvicorn.Config / uvicorn.run keyword arguments that apply `limits`."""
    return {
        "http": limited(limits),
        "timeout_keep_alive": limits.keep_alive_seconds,
        "limit_concurrency": limits.max_connections,
    }


def _too_large_response(limit: int) -> bytes:
    body = json.dumps(
        problem_body(
            431,
            "headers_too_large",
            "Request header fields too large",
            f"the request line and headers are over {limit} bytes; send a shorter URL and "
            "fewer or smaller headers (a bearer token and X-WL-Agent fit easily)",
        )
    ).encode()
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        + f"content-type: {PROBLEM_MEDIA_TYPE}\r\ncontent-length: {len(body)}\r\n".encode()
        + b"connection: close\r\n\r\n"
        + body
    )


class LimitedProtocol(HttpToolsProtocol):
    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_done = False  # the current request's line and headers are all in
        self._head_bytes = 0  # received before the head was complete
        self._refused = False
        # The current deadline (loop time, None when disarmed) and the one timer that
        # checks it: see `_arm`.
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.head_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the 431 is written; what the client still sends is dropped
        if not self._head_done:
            end = data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse_head()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._arm(self.limits.body_seconds)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_done = False
        self._head_bytes = 0
        self._arm(self.limits.head_seconds)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._head_done and not self.transport.is_closing():
            self._arm(self.limits.head_seconds)  # a fresh wait for the next request

    def _refuse_head(self) -> None:
        """Answer 431 before the app sees anything, then close. The client may still be
        sending: closing with its bytes unread would reset the connection and lose the
        answer, so the write side is shut first and the rest read and dropped."""
        self._refused = True
        self.transport.write(_too_large_response(self.limits.max_head_bytes))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._arm(self.limits.head_seconds)  # then close, whatever the client does
        else:
            self.transport.close()

    def _arm(self, seconds: float) -> None:
        """Move the deadline to `seconds` from now. It moves three times per request, and
        a timer set and cancelled each time cost more than parsing the request's headers:
        so one timer is kept, set for the deadline or earlier, and when it fires early it
        is set again for the deadline as it then stands."""
        self._deadline = deadline = self.loop.time() + seconds
        if self._timer is None or deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._set_timer(deadline)

    def _set_timer(self, at: float) -> None:
        self._timer, self._timer_at = self.loop.call_at(at, self._due), at

    def _due(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        if self.loop.time() < self._deadline:
            self._set_timer(self._deadline)
            return
        self._deadline = None
        self._expired()

    def _expired(self) -> None:
        busy = self.cycle is not None and not self.cycle.response_complete
        if self._head_done or self._refused or not busy:
            # Reading a body too slowly, or no whole request yet on an idle connection.
            self.transport.close()
        # else: a response is being written (a long-poll); its completion re-arms.


def limited(limits: Limits) -> type[LimitedProtocol]:
    """The protocol class applying `limits` (uvicorn instantiates it per connection)."""
    return type("LimitedProtocol", (LimitedProtocol,), {"limits": limits})
