"""The asyncio client, and `AsyncWork`: a claimed unit that heartbeats in a background task.

    async with AsyncClient() as client, client.claim(domain="orders") as work:
        await work.cost(123)
        await work.verify("https://ci.example/run/42")

Same rules as the sync client: retries reuse the Idempotency-Key; an exception inside the
block releases the unit (outcome `failed`); a lost claim stops the heartbeats and is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from work_ledger.client import _calls as calls
from work_ledger.client.aio_work import AsyncWork
from work_ledger.client.errors import NothingToClaim, Unreachable, error_from_response
from work_ledger.client.models import (
    Asked,
    Claim,
    Event,
    NewUnit,
    Page,
    Question,
    Registration,
    Step,
    Unit,
    UnitDetail,
)

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of `Client`: the same methods, awaited."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        agent: str | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = (url or calls.default_url()).rstrip("/")
        token = token or calls.default_token()
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if agent:
            headers[calls.AGENT_HEADER] = agent
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, call: calls.Call[T]) -> T:
        """Send one call; retry connection errors and 503 with the same Idempotency-Key."""
        timeout = self.timeout + call.wait_seconds
        for retry in range(self.retries + 1):
            last = retry == self.retries
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json if call.method != "GET" else None,
                    params=call.params,
                    headers=call.headers,
                    timeout=timeout,
                )
            except httpx.TransportError as exc:
                if last:
                    raise Unreachable(
                        f"cannot reach the work-ledger server at {self.url} ({exc!r}) after "
                        f"{retry + 1} tries; check that `work-ledger serve` runs there and that "
                        "WL_URL points at it"
                    ) from exc
            else:
                if last or not calls.retryable(response.status_code, response.content):
                    if response.is_success:
                        return call.parse(response.json())
                    raise error_from_response(response.status_code, response.content)
            await asyncio.sleep(calls.backoff_delay(retry, self.backoff))
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    # -- writes --------------------------------------------------------------------------

    async def register(
        self, units: Iterable[NewUnit | Mapping[str, Any]], *, key: str | None = None
    ) -> Registration:
        return await self.send(calls.register(units, key))

    async def claim_next(
        self,
        *,
        domain: str | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int | None = None,
        key: str | None = None,
    ) -> Claim:
        return await self.send(calls.claim_next(domain, lease_seconds, wait_seconds, key))

    async def claim_unit(
        self, unit: str, *, lease_seconds: int | None = None, key: str | None = None
    ) -> Claim:
        return await self.send(calls.claim_unit(unit, lease_seconds, key))

    async def heartbeat(
        self, attempt_id: str, *, lease_seconds: int | None = None, key: str | None = None
    ) -> Step:
        return await self.send(calls.heartbeat(attempt_id, lease_seconds, key))

    async def record_cost(
        self, attempt_id: str, cost_cents: int, *, key: str | None = None
    ) -> Step:
        return await self.send(calls.record_cost(attempt_id, cost_cents, key))

    async def start(
        self, unit: str, *, attempt_id: str | None = None, key: str | None = None
    ) -> Step:
        return await self.send(
            calls.transition(unit, "in_progress", attempt_id=attempt_id, key=key)
        )

    async def verify(
        self,
        unit: str,
        evidence_url: str,
        *,
        attempt_id: str | None = None,
        reason: str | None = None,
        key: str | None = None,
    ) -> Step:
        call = calls.transition(
            unit, "verified", attempt_id=attempt_id, evidence_url=evidence_url, reason=reason,
            key=key,
        )  # fmt: skip
        return await self.send(call)

    async def release(
        self,
        unit: str,
        *,
        outcome: str = "abandoned",
        reason: str | None = None,
        attempt_id: str | None = None,
        key: str | None = None,
    ) -> Step:
        call = calls.transition(
            unit, "ready", attempt_id=attempt_id, outcome=outcome, reason=reason, key=key
        )
        return await self.send(call)

    async def block(
        self,
        unit: str,
        question: str,
        *,
        assignee_group_slug: str | None = None,
        attempt_id: str | None = None,
        key: str | None = None,
    ) -> Asked:
        return await self.send(calls.block(unit, question, assignee_group_slug, attempt_id, key))

    async def unblock(
        self, unit: str, answer: str, *, question_id: str | None = None, key: str | None = None
    ) -> Asked:
        return await self.send(calls.unblock(unit, answer, question_id, key))

    async def dispose(
        self,
        unit: str,
        disposition: str,
        *,
        evidence_url: str | None = None,
        reason: str | None = None,
        attempt_id: str | None = None,
        key: str | None = None,
    ) -> Unit:
        return await self.send(
            calls.dispose(unit, disposition, evidence_url, reason, attempt_id, key)
        )

    async def cancel_question(
        self, question_id: str, *, reason: str | None = None, key: str | None = None
    ) -> Question:
        return await self.send(calls.cancel_question(question_id, reason, key))

    async def project_events(
        self, events: list[Mapping[str, Any]], *, key: str | None = None
    ) -> dict[str, Any]:
        return await self.send(calls.project_events(events, key))

    # -- reads ---------------------------------------------------------------------------

    async def get_unit(self, unit: str) -> UnitDetail:
        return await self.send(calls.get_unit(unit))

    async def list_units(self, **query: Any) -> Page[Unit]:
        return await self.send(calls.list_units(**query))

    async def list_events(
        self, unit: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Event]:
        return await self.send(calls.list_events(unit, limit, cursor))

    async def list_questions(self, **query: Any) -> Page[Question]:
        return await self.send(calls.list_questions(**query))

    async def get_question(self, question_id: str, *, wait_seconds: int | None = None) -> Question:
        return await self.send(calls.get_question(question_id, wait_seconds))

    async def healthz(self) -> dict[str, Any]:
        return await self.send(calls.health("/healthz"))

    # -- claiming ------------------------------------------------------------------------

    async def claim_work(
        self,
        *,
        domain: str | None = None,
        unit: str | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int | None = None,
        start: bool = True,
        heartbeat_fraction: float = 1 / 3,
    ) -> AsyncWork:
        """Claim the next (or the named) unit; `NothingToClaim` when none is claimable."""
        if unit is not None:
            got = await self.claim_unit(unit, lease_seconds=lease_seconds)
        else:
            got = await self.claim_next(
                domain=domain, lease_seconds=lease_seconds, wait_seconds=wait_seconds
            )
        if got.unit is None or got.attempt is None:
            where = f" in domain {domain!r}" if domain else ""
            raise NothingToClaim(f"no unit is claimable{where} right now; try again later")
        work = AsyncWork(
            self, got, lease_seconds=lease_seconds, heartbeat_fraction=heartbeat_fraction
        )
        if start and got.unit.state == "claimed":
            await work.start()
        return work

    def claim(self, **options: Any) -> _Claiming:
        """`async with client.claim(domain=...) as work:` (options as for `claim_work`)."""
        return _Claiming(self, options)


class _Claiming:
    def __init__(self, client: AsyncClient, options: dict[str, Any]) -> None:
        self._client, self._options = client, options
        self._work: AsyncWork | None = None

    async def __aenter__(self) -> AsyncWork:
        self._work = await self._client.claim_work(**self._options)
        return await self._work.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._work is not None
        await self._work.__aexit__(exc_type, exc, tb)
