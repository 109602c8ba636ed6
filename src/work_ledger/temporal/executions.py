"""Reading workflow executions from a Temporal server (for the follower and reconcile).

Visibility (`list_workflows`) is eventually consistent and cheap to filter; `describe` is
strongly consistent and costs one RPC per workflow. Every RPC made is counted in `rpcs`,
so a pass can report its cost. Needs the `temporal` extra.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

try:
    from temporalio.client import Client, TLSConfig, WorkflowExecution
    from temporalio.service import RPCError, RPCStatusCode
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the Temporal follower needs the Temporal SDK: pip install 'work-ledger[temporal]'"
    ) from exc

from work_ledger.temporal.reconcile import Execution, normalize_status

PAGE_SIZE = 1000
SWEEP_PAGE_SIZE = 200  # a pass reads at least one page: keep it near a quiet window's closes
log = logging.getLogger("work_ledger.temporal.follow")


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the Temporal frontend is and how to reach it (Temporal Cloud: TLS, API key)."""

    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    api_key: str | None = None  # from WL_TEMPORAL_API_KEY only, never a command-line flag

    async def client(self) -> Client:
        tls: bool | TLSConfig = self.tls or self.api_key is not None
        if self.tls_ca or self.tls_cert or self.tls_key:
            tls = TLSConfig(
                server_root_ca_cert=self.tls_ca.read_bytes() if self.tls_ca else None,
                client_cert=self.tls_cert.read_bytes() if self.tls_cert else None,
                client_private_key=self.tls_key.read_bytes() if self.tls_key else None,
            )
        return await Client.connect(
            self.address, namespace=self.namespace, tls=tls, api_key=self.api_key
        )


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a workflow, as visibility or describe shows it."""

    workflow_id: str
    run_id: str
    status: str  # a reconcile status: running, completed, failed, timed_out, ...
    start_time: dt.datetime
    close_time: dt.datetime | None
    history_length: int

    @classmethod
    def of(cls, e: WorkflowExecution) -> Run:
        status = "running" if e.status is None else normalize_status(e.status.name)
        return cls(e.id, e.run_id, status, e.start_time, e.close_time, e.history_length)


def visibility_time(moment: dt.datetime) -> str:
    """A time as Temporal's list filter takes it (RFC 3339, UTC, microseconds)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TemporalReader:
    """The reads a follower pass or a reconcile makes, counted."""

    def __init__(
        self, client: Client, *, page_size: int = PAGE_SIZE, sweep_page_size: int = SWEEP_PAGE_SIZE
    ) -> None:
        self.client = client
        self.page_size = page_size
        self.sweep_page_size = sweep_page_size
        self.rpcs = 0

    async def runs(self, query: str | None) -> list[Run]:
        """Every execution matching a visibility list filter, page by page."""
        pages = self.client.list_workflows(query, page_size=self.page_size)
        runs: list[Run] = []
        while True:
            await pages.fetch_next_page()
            self.rpcs += 1
            runs.extend(Run.of(e) for e in pages.current_page or ())
            if not pages.next_page_token:
                return runs

    async def closed_between(self, lo: dt.datetime, hi: dt.datetime) -> list[Run]:
        """Runs that closed in [lo, hi) (by CloseTime), continued-as-new ones included.

        Visibility lists closed runs newest close first, so the sweep walks pages from the
        newest and stops at the first run that closed before `lo`: its cost follows the
        window's traffic, not the namespace's closed history. (A CloseTime range filter
        would say the same, but the SQL visibility stores evaluate it on a column they do
        not index: every pass would scan the namespace's whole history.) Should a store list
        in another order, the walk sees it and reads with the range filter instead."""
        runs: list[Run] = []
        newest_first = self.client.list_workflows(
            "ExecutionStatus != 'Running'", page_size=self.sweep_page_size
        )
        previous: dt.datetime | None = None
        while True:
            await newest_first.fetch_next_page()
            self.rpcs += 1
            for run in map(Run.of, newest_first.current_page or ()):
                if run.close_time is None or (previous is not None and run.close_time > previous):
                    log.warning("visibility does not list closes newest first; filtering instead")
                    return await self.runs(
                        f"ExecutionStatus != 'Running' AND CloseTime >= '{visibility_time(lo)}' "
                        f"AND CloseTime < '{visibility_time(hi)}'"
                    )
                previous = run.close_time
                if run.close_time < lo:
                    return runs
                if run.close_time < hi:
                    runs.append(run)
            if not newest_first.next_page_token:
                return runs

    async def running_started_between(self, lo: dt.datetime, hi: dt.datetime) -> list[Run]:
        """Runs still running that started in [lo, hi)."""
        return await self.runs(
            f"ExecutionStatus = 'Running' AND StartTime >= '{visibility_time(lo)}' "
            f"AND StartTime < '{visibility_time(hi)}'"
        )

    async def describe(self, workflow_id: str) -> Run | None:
        """The workflow's newest run, strongly consistent; None if Temporal has no such
        workflow (never started, or purged by retention)."""
        self.rpcs += 1
        try:
            found = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        return Run.of(found)

    async def result(self, run: Run) -> object:
        """A completed run's result, decoded by the client's data converter."""
        self.rpcs += 1
        handle = self.client.get_workflow_handle(run.workflow_id, run_id=run.run_id)
        return await handle.result(follow_runs=False)


async def every_execution(reader: TemporalReader, workflow_ids: Iterable[str]) -> list[Execution]:
    """For reconcile: each of these workflows' newest run (describe), plus every execution
    visibility lists that is not closed (running ones without a unit are reported too)."""
    executions: dict[str, Execution] = {}
    for running in await reader.runs("ExecutionStatus = 'Running'"):
        executions[running.workflow_id] = Execution(running.workflow_id, running.status, None)
    for workflow_id in workflow_ids:
        newest = await reader.describe(workflow_id)
        if newest is not None:
            executions[workflow_id] = Execution(workflow_id, newest.status, newest.close_time)
    return list(executions.values())
