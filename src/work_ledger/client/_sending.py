"""The sans-I/O core of both clients: one `Call` through its retries and fail-overs.

A client builds a `Call` (`_calls.py`), then loops on `Sending`: what to send, whether an
answer is final, how long to wait before the next try. Only the sending itself (httpx,
sync or async) and the sleep are the client's own.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from work_ledger.client._endpoints import Endpoints
from work_ledger.client.errors import Unreachable, error_from_response

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:4001"
# The request header that names a sub-agent: the acting agent becomes `principal/suffix`.
AGENT_HEADER = "X-WL-Agent"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_WAIT_SECONDS = 60


def default_url() -> str:
    return os.environ.get("WL_URL") or DEFAULT_URL


def default_token() -> str | None:
    return os.environ.get("WL_TOKEN") or None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request: a write carries an Idempotency-Key that every retry repeats."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    wait_seconds: float = 0.0

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.key is None else {IDEMPOTENCY_HEADER: self.key}


def retryable(status: int, body: bytes) -> bool:
    """503 (database away) and a write still running under the same key are worth a retry."""
    return status == 503 or (status == 409 and b"idempotency_key_in_flight" in body)


def backoff_delay(retry: int, base: float) -> float:
    """Exponential backoff with jitter, capped at 5 seconds."""
    return float(min(5.0, base * 2**retry) * random.uniform(0.5, 1.0))


# -- sending: everything around the I/O, shared by the sync and async clients ------------


def headers(token: str | None, agent: str | None) -> dict[str, str]:
    """A client's default headers; `token` defaults to WL_TOKEN, `agent` names a sub-agent."""
    token = token or default_token()
    sent = {"Accept": "application/json"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    if agent:
        sent[AGENT_HEADER] = agent
    return sent


class Policy(Protocol):
    """What `Sending` reads off a client (at each call, so a changed setting counts)."""

    endpoints: Endpoints
    timeout: float
    retries: int
    backoff: float


class Sending(Generic[T]):
    """One call through its retries, without the I/O: what to send, what to make of it.

    The client loops: send `request`, then `answered(...)` says whether the answer is final
    (return `result(...)`), or `failed(exc)` raises on the last try; else sleep `delay()`.
    A connection error or a 503 moves the call to the client's next base URL at once; once
    every URL failed in a row, it backs off before the next round (`retries` rounds).
    """

    def __init__(self, call: Call[T], client: Policy) -> None:
        self.call, self.client = call, client
        self.tries = 0
        self.retry = 0  # back-off rounds so far
        self.moved = 0  # base URLs moved past since the last back-off
        self.url = client.endpoints.current
        self._failover = False

    @property
    def request(self) -> dict[str, Any]:
        call = self.call
        return {
            "method": call.method,
            "url": self.url + call.path,
            "json": call.json if call.method != "GET" else None,
            "params": call.params,
            "headers": call.headers,
            "timeout": self.client.timeout + call.wait_seconds,
        }

    def _last(self, failover: bool) -> bool:
        more_urls = failover and self.moved + 1 < len(self.client.endpoints)
        return self.retry == self.client.retries and not more_urls

    def answered(self, status: int, body: bytes) -> bool:
        """Whether this answer is final: a retryable one is retried until the last try."""
        self._failover = status == 503
        return not retryable(status, body) or self._last(self._failover)

    def result(self, status: int, body: bytes) -> T:
        """The parsed answer of a 2xx; the typed error the server raised otherwise."""
        if 200 <= status < 300:
            return self.call.parse(json.loads(body))
        raise error_from_response(status, body)

    def failed(self, exc: Exception) -> None:
        """A connection error: raise `Unreachable` on the last try, else retry."""
        self._failover = True
        if self._last(failover=True):
            raise Unreachable(
                f"cannot reach the work-ledger server at {self.client.endpoints} ({exc!r}) "
                f"after {self.tries + 1} tries; check that `work-ledger serve` runs there and "
                "that WL_URL points at it"
            ) from exc

    def delay(self) -> float:
        """How long to wait before the next try (and count it): none when moving on to
        another base URL, a back-off once every URL failed in a row."""
        self.tries += 1
        endpoints = self.client.endpoints
        if self._failover and len(endpoints) > 1:
            self.url = endpoints.failed(self.url)
            self.moved += 1
            if self.moved < len(endpoints):
                return 0.0  # another replica may answer right away
        delay = backoff_delay(self.retry, self.client.backoff)
        self.retry += 1
        self.moved = 0
        return delay
