"""`work-ledger temporal follow`: project every run's start and close from Temporal itself.

The worker plugin cannot see a run that is terminated or times out (no worker code runs
then); the follower reads the server. One *pass*:

1. `hi = now - lag`, `lo = checkpoint - overlap` (no checkpoint yet: `now - lookback`).
   Visibility is eventually consistent: a close may be indexed seconds late with a
   CloseTime before our last look, so a pass sweeps again the `overlap` before the
   checkpoint, and never looks at the last `lag` seconds, still settling. Only every
   `overlap / 2` seconds (and on the first pass) is that the whole overlap; the passes
   between sweep again the last `RECENT` seconds before the checkpoint, where nearly every
   late close lies: under a burst a pass then reads the closes since the last pass, not
   the last minute's again. A close visibility indexes up to `overlap / 2` seconds late is
   still swept (the next full sweep's window reaches back to it); a later one is found by
   the describe of the held units;
2. sweep the runs that closed in [lo, hi) (every closed run: its start, and its close
   unless it continued as new; `TemporalReader.closed_between` walks visibility newest
   close first and stops at `lo`) and `ExecutionStatus = 'Running' AND StartTime in
   [lo, hi)` (runs that started). A pass reads a window, so its cost follows the traffic
   of that window, never the namespace's closed history;
3. on a describe pass (the first, `--once`, then every `describe_every` seconds), describe
   each workflow whose unit the projection still holds and that visibility does not list
   as running (describe is strongly consistent): a close visibility indexed outside every
   window is still projected, and a fleet of long runs costs a list page per 1,000 runs,
   not a describe each;
4. post the events through the ledger's ingest (`POST /projection/events`, projector
   token), keyed by `lifecycle.step_key` like the plugin's, so whichever source comes first
   applies a step and the other is a duplicate. Delivery overlaps reading: a batch leaves
   as soon as its workflows are read (a workflow's events together, in order, in one
   batch), so a burst's first closes reach the ledger while the last results are read;
5. only then move the durable checkpoint to `hi`. A pass that fails (ledger or Temporal
   down, the follower killed) leaves it where it was: the next pass sweeps the same window
   again, and the keys make the repeat harmless.

A completed run's evidence is the result's `evidence_url` (a JSON object carrying one),
else `evidence_url_template`; a completed run without either is left out (the ledger
verifies only with evidence), logged, and does not hold back the rest of its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.events import evidence_url, lifecycle_event
from work_ledger.temporal.executions import Run, TemporalReader
from work_ledger.temporal.forwarder import ForwardRefused, LedgerForwarder
from work_ledger.temporal.lifecycle import STATUS_STEPS, step_key

T = TypeVar("T")
log = logging.getLogger("work_ledger.temporal.follow")
BATCH = 100  # events per ledger request; a workflow's events always share one
SENDS = 4  # ledger requests in flight (half of serve's default database pool)
READS = 32  # Temporal reads (describe, result) in flight
RECENT = 5.0  # seconds before the checkpoint a pass between two full sweeps sweeps again
RUNNING = "ExecutionStatus = 'Running'"
COUNTS = ("applied", "duplicates", "refused", "stale", "unmatched")


@dataclass(frozen=True, slots=True)
class FollowSettings:
    interval: float = 1.0  # seconds from the start of one pass to the next
    lag: float = 0.5  # the newest seconds of visibility are left for the next pass
    overlap: float = 60.0  # seconds before the checkpoint swept again
    lookback: float = 3600.0  # first pass, no checkpoint: how far back to start
    describe_every: float = 30.0  # seconds between describes of the held units
    evidence_url_template: str | None = None


@dataclass
class PassReport:
    """What one pass read, sent and got back; printed as one JSON line."""

    lo: dt.datetime
    hi: dt.datetime
    full_sweep: bool = True  # the whole overlap swept again (else the last RECENT seconds)
    runs: int = 0
    described: int = 0
    sent: int = 0
    without_evidence: int = 0
    rejected: int = 0
    temporal_rpcs: int = 0
    ledger_requests: int = 0
    read_seconds: float = 0.0  # reading Temporal (the first batches are delivered meanwhile)
    deliver_seconds: float = 0.0  # after the last read, until every batch was delivered
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    salt: str = field(default_factory=lambda: uuid.uuid4().hex)  # this pass's Idempotency-Key

    def as_json(self) -> dict[str, Any]:
        return {
            "swept_from": self.lo.isoformat(),
            "swept_until": self.hi.isoformat(),
            "full_sweep": self.full_sweep,
            "runs": self.runs,
            "described": self.described,
            "sent": self.sent,
            "without_evidence": self.without_evidence,
            "rejected": self.rejected,
            "temporal_rpcs": self.temporal_rpcs,
            "ledger_requests": self.ledger_requests,
            "read_seconds": self.read_seconds,
            "deliver_seconds": self.deliver_seconds,
            **self.counts,
        }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Follower:
    """Passes over one namespace, each projecting what closed or started since the last."""

    def __init__(
        self,
        reader: TemporalReader,
        state: FollowState,
        forwarder: LedgerForwarder,
        *,
        namespace: str,
        settings: FollowSettings = FollowSettings(),
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.reader, self.state, self.forwarder = reader, state, forwarder
        self.namespace, self.settings, self.clock = namespace, settings, clock
        # Keys this process delivered, with the time that placed them in a window: the
        # overlap re-reads them, and they need not be posted again (pruned past the window).
        self.delivered: dict[str, dt.datetime] = {}
        self.described_at: dt.datetime | None = None
        self.swept_all_at: dt.datetime | None = None  # the last pass that swept all overlap

    async def run_pass(self, *, describe: bool | None = None) -> PassReport:
        """One pass (see the module docstring); raises if Temporal or the ledger fails."""
        now = self.clock()
        s = self.settings
        if describe is None:
            describe = self.described_at is None or (
                (now - self.described_at).total_seconds() >= s.describe_every
            )
        hi = now - dt.timedelta(seconds=s.lag)
        checkpoint = await self.state.checkpoint(self.namespace)
        start = checkpoint or now - dt.timedelta(seconds=s.lookback)
        full = self.swept_all_at is None or (
            (now - self.swept_all_at).total_seconds() >= s.overlap / 2
        )
        overlap = s.overlap if full else min(s.overlap, RECENT)
        report = PassReport(min(start - dt.timedelta(seconds=overlap), hi), hi, full)
        rpcs_before = self.reader.rpcs
        began = time.perf_counter()
        delivery = _Delivery(self._send_batch, self.delivered, report)
        try:
            seen = await self._swept(report, delivery)
            if describe:
                await self._described(report, seen, delivery)
        except BaseException:
            await delivery.abandon()
            raise
        read = time.perf_counter()
        await delivery.finish()
        report.read_seconds = round(read - began, 3)
        report.deliver_seconds = round(time.perf_counter() - read, 3)
        await self.state.advance(self.namespace, hi)
        if describe:
            self.described_at = now
        if full:
            self.swept_all_at = now
        oldest = min(start - dt.timedelta(seconds=s.overlap), hi)  # the next full sweep's
        self.delivered = {k: t for k, t in self.delivered.items() if t >= oldest}
        report.temporal_rpcs = self.reader.rpcs - rpcs_before
        return report

    async def follow(self, stop: asyncio.Event, on_pass: Callable[[PassReport], None]) -> None:
        """Pass after pass until `stop` is set, one every `interval` seconds from the start
        of the last (at once after a pass that took longer: a burst of closes is not left
        waiting); a failed pass is logged and tried again after `interval`."""
        while not stop.is_set():
            began = time.monotonic()
            pause = self.settings.interval
            try:
                on_pass(await self.run_pass())
                pause -= time.monotonic() - began
            except ForwardRefused:
                raise  # a wrong token or URL: passing again cannot help
            except Exception as exc:  # Temporal, the ledger or its database unreachable
                log.warning("pass failed; will sweep again: %s: %s", type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(pause, 0.0))

    # -- reading --------------------------------------------------------------------------

    async def _swept(self, report: PassReport, delivery: _Delivery) -> set[str]:
        """Read the window's runs; each workflow's events go to `delivery` as soon as its
        runs are read. Returns the workflows seen."""
        closed = await self.reader.closed_between(report.lo, report.hi)
        running = await self.reader.running_started_between(report.lo, report.hi)
        report.runs = len(closed) + len(running)
        by_workflow: dict[str, list[Run]] = {}
        for run in (*running, *closed):
            by_workflow.setdefault(run.workflow_id, []).append(run)

        async def read(runs: list[Run]) -> None:
            events: list[dict[str, Any]] = []
            for run in runs:
                if run.status == "running":
                    events.append(self._started(run))
                else:
                    events += await self._of_closed(run, report)
            delivery.add(events)

        await _bounded([read(runs) for runs in by_workflow.values()], READS)
        return set(by_workflow)

    async def _described(self, report: PassReport, seen: set[str], delivery: _Delivery) -> None:
        held = [w for w in await self.state.held_workflows() if w not in seen]
        if held:  # visibility's running list (a page per 1,000) spares most describes
            running = {r.workflow_id for r in await self.reader.runs(RUNNING)}
            held = [w for w in held if w not in running]
        report.described = len(held)

        async def read(workflow_id: str) -> None:
            delivery.add(await self._describe(workflow_id, report))

        await _bounded([read(w) for w in held], READS)

    async def _describe(self, workflow_id: str, report: PassReport) -> list[dict[str, Any]]:
        run = await self.reader.describe(workflow_id)
        if run is None:
            return []
        if run.status == "running":
            return [self._started(run)]
        return await self._of_closed(run, report)

    def _started(self, run: Run) -> dict[str, Any]:
        return self._event("started", run, run.start_time, {})

    async def _of_closed(self, run: Run, report: PassReport) -> list[dict[str, Any]]:
        started = self._started(run)
        step = STATUS_STEPS.get(run.status)
        if step is None or run.close_time is None:  # continued as new: the next run counts
            return [started]
        detail: dict[str, Any] = {"status": run.status}
        if self._close_key(run) in self.delivered:
            return [started]  # projected by an earlier pass of this process
        if step == "completed":
            link = await self._evidence(run)
            if link is None:
                report.without_evidence += 1
                log.warning(
                    "%s (run %s) completed without evidence (no evidence_url in its result, "
                    "no --evidence-url-template); its close is not projected",
                    run.workflow_id,
                    run.run_id,
                )
                return [started]
            detail = {"evidence_url": link}
        return [started, self._event(step, run, run.close_time, detail)]

    def _close_key(self, run: Run) -> str:
        return step_key(self.namespace, run.workflow_id, run.run_id, "completed", 0)

    async def _evidence(self, run: Run) -> str | None:
        try:
            result = await self.reader.result(run)
        except Exception as exc:  # a result this client cannot decode: the template decides
            log.info("result of %s not readable (%s); using the template", run.run_id, exc)
            result = None
        return evidence_url(
            result,
            template=self.settings.evidence_url_template,
            namespace=self.namespace,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
        )

    def _event(
        self, step: str, run: Run, at: dt.datetime, detail: dict[str, Any]
    ) -> dict[str, Any]:
        event = lifecycle_event(
            step,
            namespace=self.namespace,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            occurred_at=at,
            history_length=run.history_length,
            detail=detail,
        )
        event["detail"]["source"] = "follower"
        return event

    # -- writing --------------------------------------------------------------------------

    async def _send_batch(self, batch: list[dict[str, Any]], report: PassReport) -> None:
        try:
            await self._send(batch, report)
        except ForwardRefused as exc:
            if exc.status != 422:
                raise
            for event in batch:  # one malformed event must not hold back the others
                await self._send_alone(event, report)

    async def _send(self, batch: list[dict[str, Any]], report: PassReport) -> None:
        report.ledger_requests += 1
        answer = await self.forwarder.send(batch, salt=report.salt)
        report.sent += len(batch)
        for name in COUNTS:
            report.counts[name] += int(answer.get(name, 0))
        for e in batch:
            self.delivered[e["source_event_id"]] = dt.datetime.fromisoformat(e["occurred_at"])

    async def _send_alone(self, event: dict[str, Any], report: PassReport) -> None:
        try:
            await self._send([event], report)
        except ForwardRefused as exc:
            if exc.status != 422:
                raise
            report.rejected += 1
            log.warning("the ledger refused %s: %s", event["source_event_id"], exc.detail)


class _Delivery:
    """Batches of about BATCH events, sent while the pass still reads, SENDS at a time.

    Each workflow's events arrive together (`add`) and stay together, in order, in one
    batch: batches may be delivered side by side without reordering any unit's steps."""

    def __init__(
        self,
        send: Callable[[list[dict[str, Any]], PassReport], Awaitable[None]],
        delivered: dict[str, dt.datetime],
        report: PassReport,
    ) -> None:
        self.send, self.delivered, self.report = send, delivered, report
        self.batch: list[dict[str, Any]] = []
        self.sending: list[asyncio.Task[None]] = []
        self.gate = asyncio.Semaphore(SENDS)

    def add(self, events: list[dict[str, Any]]) -> None:
        """One workflow's events; those this process delivered before are left out."""
        fresh: dict[str, dict[str, Any]] = {}
        for e in events:
            if e["source_event_id"] not in self.delivered:
                fresh.setdefault(e["source_event_id"], e)
        if not fresh:
            return
        if self.batch and len(self.batch) + len(fresh) > BATCH:
            self._flush()
        self.batch += sorted(fresh.values(), key=lambda e: (e["occurred_at"], e["event_id"]))

    def _flush(self) -> None:
        batch, self.batch = self.batch, []
        self.sending.append(asyncio.create_task(self._gated(batch)))

    async def _gated(self, batch: list[dict[str, Any]]) -> None:
        async with self.gate:
            await self.send(batch, self.report)

    async def finish(self) -> None:
        """Send what is left, wait for every batch; raise the first failure."""
        if self.batch:
            self._flush()
        outcomes = await asyncio.gather(*self.sending, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def abandon(self) -> None:
        """The pass failed: stop the batches in flight (the checkpoint stays, and the next
        pass sends them again; the keys make any that got through duplicates)."""
        for task in self.sending:
            task.cancel()
        await asyncio.gather(*self.sending, return_exceptions=True)


async def _bounded(coros: list[Coroutine[Any, Any, T]], limit: int) -> list[T]:
    """Await all, at most `limit` at a time, results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(coro: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))
