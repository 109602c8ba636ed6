"""`AsyncClient`: a typed client of the work-ledger HTTP API.

    async with AsyncClient() as client, client.claim(domain="orders") as work:
        ...                                   # heartbeats keep the lease alive meanwhile
        await work.cost(123)
        await work.verify("https://ci.example/run/42")

The request, the Idempotency-Key, the retries and the parsing of each answer live in
`_calls.py`, once; this module only sends. The sync client, sync.py, is generated from
aio.py by scripts/unasync.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import httpx

from work_ledger.client import _calls as calls
from work_ledger.client._endpoints import Endpoints, refuse_token_in_clear, tls_verify
from work_ledger.client._sending import Call, Sending, default_url, headers
from work_ledger.client.aio_reads import AsyncReads
from work_ledger.client.aio_work import AsyncClaiming, AsyncWork
from work_ledger.client.flow import Control
from work_ledger.client.models import (
    Asked,
    BulkResult,
    Claim,
    NewChild,
    NewUnit,
    Question,
    Registration,
    Split,
    Step,
    Unit,
)
from work_ledger.client.money import Budget, CostRecord

T = TypeVar("T")


class AsyncClient(AsyncReads):
    """A typed client of the work-ledger HTTP API (safe to share between tasks and threads).

    `url` and `token` default to WL_URL and WL_TOKEN; `url` may list several replicas'
    base URLs, comma-separated. `agent` names a sub-agent, so the server records the acting
    agent as `principal/agent`. Writes carry an Idempotency-Key; connection errors and 503
    are retried with the same key (on the next URL), so a retry never acts twice.
    `ca_bundle` (default WL_CA_BUNDLE, then SSL_CERT_FILE) is the PEM file of CAs that
    https:// servers are checked against.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        agent: str | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        ca_bundle: str | os.PathLike[str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoints = Endpoints(url or default_url())
        sent = headers(token, agent)
        if "Authorization" in sent:
            refuse_token_in_clear(self.endpoints.urls, transport)
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._http = httpx.AsyncClient(
            headers=sent,
            timeout=timeout,
            verify=tls_verify(ca_bundle, self.endpoints.urls),
            transport=transport,
        )

    @property
    def url(self) -> str:
        """The base URL in use (the first of `url=` until one fails)."""
        return self.endpoints.current

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one call; retry connection errors and 503 with the same Idempotency-Key."""
        sending = Sending(call, self)
        while True:
            try:
                response = await self._http.request(**sending.request)
            except httpx.TransportError as exc:
                sending.failed(exc)
            else:
                if sending.answered(response.status_code, response.content):
                    return sending.result(response.status_code, response.content)
            await asyncio.sleep(sending.delay())

    # -- writes --------------------------------------------------------------------------

    async def register(
        self,
        units: Iterable[NewUnit | Mapping[str, Any]],
        *,
        requires: Iterable[str] = (),
        max_attempts: int | None = None,
        key: str | None = None,
    ) -> Registration:
        """Register up to 1000 units; ones already known by external_ref count as existing.
        A unit waits while a prerequisite it `requires` (its own, else the batch's: refs of
        units registered earlier or in this batch) is unfinished; `max_attempts` (1..100,
        its own, else the batch's, else the server's WL_MAX_ATTEMPTS) bounds its failures."""
        return await self.send(calls.register(units, requires, max_attempts, key))

    async def claim_next(
        self,
        *,
        domain: str | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int | None = None,
        key: str | None = None,
    ) -> Claim:
        """Claim the oldest claimable unit (or get back the one held); empty when none."""
        return await self.send(calls.claim_next(domain, lease_seconds, wait_seconds, key))

    async def claim_unit(
        self, unit: str, *, lease_seconds: int | None = None, key: str | None = None
    ) -> Claim:
        """Claim one named unit (uuid or external_ref)."""
        return await self.send(calls.claim_unit(unit, lease_seconds, key))

    async def heartbeat(
        self, attempt_id: str, *, lease_seconds: int | None = None, key: str | None = None
    ) -> Step:
        return await self.send(calls.heartbeat(attempt_id, lease_seconds, key))

    async def record_cost(
        self,
        attempt_id: str,
        cost_cents: int,
        *,
        model: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        estimated: bool = False,
        key: str | None = None,
    ) -> Step:
        """Record spent money (cents >= 0) on an attempt, optionally by model and tokens;
        `estimated`: the cents are a list-price estimate. Recorded past a budget's cap too."""
        record = CostRecord(
            cost_cents,
            model,
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            estimated,
        )
        return await self.send(calls.record_cost(attempt_id, record, key))

    async def start(
        self, unit: str, *, attempt_id: str | None = None, key: str | None = None
    ) -> Step:
        return await self.send(calls.start(unit, attempt_id, key))

    async def verify(
        self,
        unit: str,
        evidence_url: str,
        *,
        attempt_id: str | None = None,
        reason: str | None = None,
        key: str | None = None,
    ) -> Step:
        return await self.send(calls.verify(unit, evidence_url, attempt_id, reason, key))

    async def release(
        self,
        unit: str,
        *,
        outcome: str = "abandoned",
        reason: str | None = None,
        attempt_id: str | None = None,
        key: str | None = None,
    ) -> Step:
        """Give the unit back (ready); the attempt ends `abandoned` or `failed`."""
        return await self.send(calls.release(unit, outcome, reason, attempt_id, key))

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

    async def split(
        self,
        unit: str,
        children: Iterable[NewChild | Mapping[str, Any] | str],
        *,
        reason: str | None = None,
        attempt_id: str | None = None,
        key: str | None = None,
    ) -> Split:
        """Hand back an in_progress unit too big for one attempt as child units (<= 100;
        each an external_ref, or {"external_ref", "domain"?, "requires"?}). The attempt ends
        `split`; the unit waits on its children, then comes back ready to integrate."""
        return await self.send(calls.split(unit, children, reason, attempt_id, key))

    async def waive(
        self, unit: str, prerequisite: str, *, reason: str | None = None, key: str | None = None
    ) -> Unit:
        """Operator: drop one prerequisite of a waiting unit (one held by a DEAD or DEFERRED
        prerequisite); the unit becomes ready if nothing else holds it."""
        return await self.send(calls.waive(unit, prerequisite, reason, key))

    async def set_budget(
        self, fleet: str, cap_cents: int, *, domain: str | None = None, key: str | None = None
    ) -> Budget:
        """Operator: set the cap of a fleet's budget (or of one domain of it). Once spent >=
        cap, nothing in its scope is claimed anew; raising the cap wakes long-polls."""
        return await self.send(calls.set_budget(fleet, cap_cents, domain, key))

    async def bulk(
        self,
        action: str,
        fleet: str,
        *,
        reason: str,
        disposition: str | None = None,
        domain: str | None = None,
        states: Iterable[str] | None = None,
        external_ref_prefix: str | None = None,
        held_by: str | None = None,
        dry_run: bool = True,
        limit: int | None = None,
        key: str | None = None,
    ) -> BulkResult:
        """Operator: `action` "dispose" (with `disposition`) or "release" (attempts end
        abandoned) every unit of `fleet` the filters match. A dry run (the default) changes
        nothing and answers what the real run (`dry_run=False`) would do now; a real run
        changes all of `changed` or nothing. Units whose state does not allow the action
        are in `skipped`, with the rule; more matches than `limit` (default 1000, at most
        10000) raise `InvalidInput` naming the count."""
        where = {
            "fleet": fleet,
            "domain": domain,
            "state": None if states is None else list(states),
            "external_ref_prefix": external_ref_prefix,
            "held_by": held_by,
        }
        return await self.send(calls.bulk(action, where, reason, disposition, dry_run, limit, key))

    async def set_controls(
        self,
        fleet: str,
        *,
        reason: str,
        domain: str | None = None,
        max_live: int | None = calls.UNCHANGED,
        paused: bool | None = None,
        gate: dict[str, Any] | None = calls.UNCHANGED,
        force: bool = False,
        key: str | None = None,
    ) -> Control:
        """Operator: change the flow controls of a fleet (or of one domain of it). A
        control left out stays; `max_live=None` removes the cap, `gate=None` the gate
        ({"max_failed_share": 0..1, "last_attempts": 1..10000}). A gated raise is refused
        (`RampGateClosed`) unless the gate's figures allow it or `force` is true."""
        return await self.send(
            calls.set_controls(
                fleet,
                reason,
                domain=domain,
                max_live=max_live,
                paused=paused,
                gate=gate,
                force=force,
                key=key,
            )
        )

    async def cancel_question(
        self, question_id: str, *, reason: str | None = None, key: str | None = None
    ) -> Question:
        return await self.send(calls.cancel_question(question_id, reason, key))

    async def route_question(
        self, question_id: str, external_task_id: str, *, key: str | None = None
    ) -> Question:
        """Record the human queue's item for an open question, once: the same id again
        changes nothing; another id is refused (409 `question_routed_once`, naming the
        routed one in `extra["external_task_id"]`), as is a closed question
        (`question_routed_while_open`). Either way, close the item you created."""
        return await self.send(calls.route_question(question_id, external_task_id, key))

    async def project_events(
        self, events: list[Mapping[str, Any]], *, key: str | None = None
    ) -> dict[str, Any]:
        return await self.send(calls.project_events(events, key))

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
        """Claim the next unit (or the named `unit`) now; enter the `AsyncWork` to heartbeat.

        Raises `NothingToClaim` when no unit is claimable (after `wait_seconds`). With
        `start`, a claimed unit is moved to in_progress at once.
        """
        got = calls.claimed(
            await self.send(calls.claim(domain, unit, lease_seconds, wait_seconds)), domain
        )
        work = AsyncWork(
            self, got, lease_seconds=lease_seconds, heartbeat_fraction=heartbeat_fraction
        )
        if start and work.unit.state == "claimed":
            await work.start()
        return work

    def claim(
        self,
        *,
        domain: str | None = None,
        unit: str | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int | None = None,
        start: bool = True,
        heartbeat_fraction: float = 1 / 3,
    ) -> AsyncClaiming:
        """`async with client.claim(domain=...) as work:` claims on entry (as `claim_work`),
        heartbeats while the block runs, and releases the unit `failed` if the block raises."""
        return AsyncClaiming(
            lambda: self.claim_work(
                domain=domain,
                unit=unit,
                lease_seconds=lease_seconds,
                wait_seconds=wait_seconds,
                start=start,
                heartbeat_fraction=heartbeat_fraction,
            )
        )
