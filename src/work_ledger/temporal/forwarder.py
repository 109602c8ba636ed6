"""Delivering events to POST /projection/events, retrying safely.

Every retry of a batch carries the same `Idempotency-Key`, and each event carries its
exactly-once `source_event_id`, so a retry after a lost response never applies anything
twice. Network errors, 429 and 5xx are retried with exponential backoff; any other
refusal (401, 403, 422: the batch itself is wrong) raises `ForwardRefused` at once, since
sending it again cannot help.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from work_ledger.temporal.events import idempotency_key

RETRYABLE = frozenset({429, 500, 502, 503, 504})
PATH = "/projection/events"


class ForwardRefused(Exception):
    """The ledger refused the batch (4xx): fix the events or the token, do not retry."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"the ledger refused the projection batch ({status}): {detail}")
        self.status = status
        self.detail = detail


class ForwardUnavailable(Exception):
    """Every attempt failed on the network or with a 5xx/429; the caller may retry later."""


class LedgerForwarder:
    """POSTs batches of workflow events to the ledger with a projector token."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        attempts: int = 5,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds
        self.timeout = timeout_seconds
        self.transport = transport
        self.sleep = sleep

    async def send(self, events: Sequence[Mapping[str, Any]], *, salt: str = "") -> dict[str, Any]:
        """Deliver one batch; returns the ledger's counts (applied, duplicates, ...)."""
        headers = self.headers | {"Idempotency-Key": idempotency_key(events, salt)}
        body = {"events": [dict(e) for e in events]}
        last = "no attempt made"
        async with httpx.AsyncClient(
            base_url=self.url, timeout=self.timeout, transport=self.transport
        ) as client:
            for attempt in range(self.attempts):
                if attempt:
                    await self.sleep(self.backoff_seconds * 2 ** (attempt - 1))
                try:
                    response = await client.post(PATH, json=body, headers=headers)
                except httpx.TransportError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    continue
                if response.status_code == 200:
                    counts: dict[str, Any] = response.json()
                    return counts
                if response.status_code not in RETRYABLE:
                    raise ForwardRefused(response.status_code, _detail(response))
                last = f"HTTP {response.status_code}: {_detail(response)}"
        raise ForwardUnavailable(
            f"the ledger at {self.url} did not take the batch after {self.attempts} attempts "
            f"(last: {last}); nothing was lost, send it again later"
        )


def _detail(response: httpx.Response) -> str:
    try:
        problem = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(problem, dict) and "detail" in problem:
        return str(problem["detail"])
    return response.text[:500]
