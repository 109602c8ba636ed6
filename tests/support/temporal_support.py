"""Helpers of the Temporal tests: workers, runs, an in-process follower, the event log."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from support.wl_workflows import Migrate
from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.executions import TemporalReader
from work_ledger.temporal.follower import Follower, FollowSettings
from work_ledger.temporal.forwarder import LedgerForwarder
from work_ledger.temporal.plugin import WorkLedgerPlugin

OPERATOR = Actor("operator", privileged=True)
TEMPLATE = "https://temporal.example/{namespace}/{workflow_id}/{run_id}"


async def register(ledger: Ledger, *workflow_ids: str) -> None:
    """One unit per workflow id, external_ref `unit-<workflow_id>`."""
    units = [NewUnit(f"unit-{w}", "fleet-a", "orders", workflow_id=w) for w in workflow_ids]
    await ledger.register(units, OPERATOR)


def ids(*names: str) -> dict[str, str]:
    """Workflow ids unique to this test, by name."""
    tag = uuid.uuid4().hex[:8]
    return {name: f"{name}-{tag}" for name in names}


@contextlib.asynccontextmanager
async def worker(
    client: Client, *, url: str | None = None, token: str | None = None
) -> AsyncIterator[str]:
    """A worker of Migrate on a task queue of its own (with the plugin when `url` is given);
    yields the task queue."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    plugins = [] if url is None else [WorkLedgerPlugin(url, token or "")]
    async with Worker(client, task_queue=queue, workflows=[Migrate], plugins=plugins):
        yield queue


async def start(
    client: Client, queue: str, workflow_id: str, mode: str, **options: Any
) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow("Migrate", mode, id=workflow_id, task_queue=queue, **options)


async def settle(handles: Sequence[WorkflowHandle[Any, Any]]) -> None:
    """Wait until every run has ended, however it ended."""
    for handle in handles:
        with contextlib.suppress(Exception):
            await handle.result()


def follower(client: Client, database_url: str, url: str, token: str, **settings: Any) -> Follower:
    """A follower of the client's namespace, as `work-ledger temporal follow` builds it;
    lag 0 so a test need not wait for the newest second."""
    chosen = FollowSettings(**{"lag": 0.0, "evidence_url_template": None, **settings})
    return Follower(
        TemporalReader(client),
        FollowState(database_url),
        LedgerForwarder(url, token, attempts=2, backoff_seconds=0.1),
        namespace=client.namespace,
        settings=chosen,
    )


async def until(
    check: Callable[[], Awaitable[bool]], step: Callable[[], Awaitable[object]]
) -> None:
    """Run `step` until `check` holds (visibility is eventually consistent); 60 s at most."""
    async with asyncio.timeout(60):
        while True:
            await step()
            if await check():
                return
            await asyncio.sleep(0.2)


async def transitions(ledger: Ledger, workflow_id: str) -> list[str]:
    """The unit's state changes, oldest first: `event_type:from->to` (projected excluded)."""
    rows = await ledger.store.pool.fetch(
        "SELECT e.event_type, e.from_state, e.to_state FROM work_unit_events AS e "
        "JOIN work_units AS u ON u.id = e.unit_id WHERE u.workflow_id = $1 "
        "AND e.event_type NOT IN ('projected', 'registered', 'heartbeat') ORDER BY e.id",
        workflow_id,
    )
    return [f"{r['event_type']}:{r['from_state']}->{r['to_state']}" for r in rows]
