"""Prometheus metrics (DESIGN §8): what the ledger holds, read from the views, and how the
API behaves, counted as requests pass.

From the views, in one query per scrape at most (cached `cache_seconds`), never on the
request path:

    work_ledger_units{domain,state}          gauge    queue depth (v_queue_depth)
    work_ledger_stalled_units{domain}        gauge    leased units past the stall threshold
    work_ledger_claims_total{domain}         counter  attempts ever started (v_cost_per_unit)
    work_ledger_reclaims_total{domain}       counter  attempts lost to a lapsed lease (v_rework)
    work_ledger_open_questions{assignee_group_slug}             gauge  units waiting on people
    work_ledger_oldest_open_question_seconds{assignee_group_slug}  gauge  0 when none is open
                                             (both v_open_questions)
    work_ledger_waiting_units{domain,reason} gauge    units waiting (v_waiting): reason
                                             unfinished_prerequisite, deferred_prerequisite,
                                             dead_prerequisite, attempt_limit
    work_ledger_parked_units{domain}         gauge    units parked at their attempt limit
    work_ledger_oldest_parked_seconds{domain}       gauge  the longest such wait
    work_ledger_oldest_dead_held_seconds{domain}    gauge  the longest wait on a DEAD prerequisite
    work_ledger_budget_cap_cents{fleet,domain}      gauge  each budget (v_budget; domain "(all)":
    work_ledger_budget_spent_cents{fleet,domain}    gauge  the fleet's), what its scope spent
    work_ledger_budget_remaining_cents{fleet,domain} gauge and what remains
    work_ledger_scope_live_units{fleet,domain}      gauge  each controlled scope (v_controls):
    work_ledger_scope_max_live{fleet,domain}        gauge  live units against its cap, paused
    work_ledger_scope_paused{fleet,domain}          gauge  (1/0) and for how long, and its
    work_ledger_scope_paused_seconds{fleet,domain}  gauge  ready units
    work_ledger_scope_ready_units{fleet,domain}     gauge
    work_ledger_open_units{domain}           gauge    units not done or abandoned (v_forecast;
                                             domain "(all)": every domain)
    work_ledger_forecast_days{domain,quantile}  gauge  days until the open units are done at
                                             the last 28 days' pace: quantile "0.5" (P50)
                                             and "0.85" (P85); absent without the history

These describe the ledger, not this process: every replica reports the same values
(aggregate them with max, not sum), and they survive restarts.

Counted by this process as requests pass (by api/metrics.py's MetricsMiddleware):

    work_ledger_request_duration_seconds{method,route,status}  histogram  route = template
    work_ledger_refusals_total{code,invariant}    counter  every problem+json answer
    work_ledger_claim_responses_total{result}     counter  new | resumed | none (empty poll)
    work_ledger_read_errors_total                 counter  scrapes whose view query failed
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import TypeVar

import asyncpg
from asyncpg import Pool
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from work_ledger.errors import WorkLedgerError
from work_ledger.readside.gauges import WAIT_REASONS, GaugeSnapshot, read_gauges

CACHE_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 5.0
LATENCY_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
Family = TypeVar("Family", GaugeMetricFamily, CounterMetricFamily)


class _ViewCollector(Collector):
    """Turns the last snapshot of the views into metric families at scrape time."""

    def __init__(self, metrics: LedgerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        snapshot = self.metrics.snapshot
        if snapshot is None:
            return
        units = GaugeMetricFamily(
            "work_ledger_units",
            "Units in each state, per domain (v_queue_depth).",
            labels=["domain", "state"],
        )
        for (domain, state), count in sorted(snapshot.units.items()):
            units.add_metric([domain, state], count)
        yield units
        stalled = GaugeMetricFamily(
            "work_ledger_stalled_units",
            "Leased units whose holder is silent past WL_STALL_SECONDS (v_stall_list).",
            labels=["domain"],
        )
        for domain, count in sorted(snapshot.stalled.items()):
            stalled.add_metric([domain], count)
        yield stalled
        yield self._by_group(
            "work_ledger_open_questions",
            "Open blocking questions (units waiting on people), per assignee group "
            "(v_open_questions).",
            snapshot.open_questions,
        )
        yield self._by_group(
            "work_ledger_oldest_open_question_seconds",
            "Age of the oldest open blocking question, per assignee group; 0 when none is "
            "open (v_open_questions).",
            snapshot.oldest_question_seconds,
        )
        yield self._counter(
            "work_ledger_claims",
            "Attempts ever started, per domain: one per claim (v_cost_per_unit).",
            snapshot.claims,
        )
        yield self._counter(
            "work_ledger_reclaims",
            "Attempts superseded by a stale reclaim after their lease lapsed (v_rework).",
            snapshot.reclaims,
        )
        yield from _waiting_families(snapshot)
        yield from _budget_families(snapshot)
        yield from _control_families(snapshot)
        yield from _forecast_families(snapshot)

    @staticmethod
    def _by_group(name: str, documentation: str, values: dict[str, int]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=["assignee_group_slug"])
        return _filled(family, values)

    @staticmethod
    def _counter(name: str, documentation: str, values: dict[str, int]) -> CounterMetricFamily:
        return _filled(CounterMetricFamily(name, documentation, labels=["domain"]), values)


def _waiting_families(snapshot: GaugeSnapshot) -> Iterator[Metric]:
    """Waiting units by domain and reason (every reason of every domain, 0 included), and
    the oldest waits the alerts watch: at the attempt limit, and on a DEAD prerequisite."""
    waiting = GaugeMetricFamily(
        "work_ledger_waiting_units",
        "Units waiting, per domain and reason (v_waiting): an unfinished, DEFERRED or DEAD "
        "prerequisite, or the attempt limit (the ledger's own question).",
        labels=["domain", "reason"],
    )
    domains = sorted(snapshot.domains | {d for d, _ in snapshot.waiting})
    for domain in domains:
        for reason in WAIT_REASONS:
            found = snapshot.waiting.get((domain, reason))
            waiting.add_metric([domain, reason], found.units if found else 0)
    yield waiting
    for name, reason, what, field in (
        (
            "work_ledger_parked_units",
            "attempt_limit",
            "Units parked at their attempt limit "
            "(waiting on the ledger's question), per domain (v_waiting).",
            "units",
        ),
        (
            "work_ledger_oldest_parked_seconds",
            "attempt_limit",
            "How long the longest-parked "
            "unit has waited at its attempt limit, per domain; 0 when none (v_waiting).",
            "oldest_seconds",
        ),
        (
            "work_ledger_oldest_dead_held_seconds",
            "dead_prerequisite",
            "How long the unit "
            "waiting longest on a DEAD prerequisite has waited, per domain; 0 when none "
            "(v_waiting).",
            "oldest_seconds",
        ),
    ):
        values = {d: getattr(snapshot.waiting.get((d, reason)), field, 0) for d in domains}
        yield _filled(GaugeMetricFamily(name, what, labels=["domain"]), values)


def _budget_families(snapshot: GaugeSnapshot) -> Iterator[Metric]:
    for name, what, field in (
        ("work_ledger_budget_cap_cents", "The cap of each budget (v_budget).", "cap_cents"),
        ("work_ledger_budget_spent_cents", "What each budget's scope has spent.", "spent_cents"),
        ("work_ledger_budget_remaining_cents", "What remains of each budget.", "remaining_cents"),
    ):
        family = GaugeMetricFamily(
            name, what + ' Domain "(all)": a fleet-wide budget.', labels=["fleet", "domain"]
        )
        for (fleet, domain), budget in sorted(snapshot.budgets.items()):
            family.add_metric([fleet, domain], getattr(budget, field))
        yield family


def _control_families(snapshot: GaugeSnapshot) -> Iterator[Metric]:
    """Each controlled scope (v_controls): live against its cap, paused and for how long,
    and its ready units (the alerts' "pinned at its cap with ready work behind it")."""
    for name, what, value in (
        ("work_ledger_scope_live_units", "Live units (claimed or in_progress).", "live"),
        ("work_ledger_scope_max_live", "The cap on live units; absent when uncapped.", "cap"),
        ("work_ledger_scope_paused", "1 while the scope is paused.", "paused"),
        ("work_ledger_scope_paused_seconds", "How long it has been paused; 0 if not.",
         "paused_seconds"),
        ("work_ledger_scope_ready_units", "Ready units of the scope.", "ready"),
    ):  # fmt: skip
        family = GaugeMetricFamily(
            name,
            what + ' Per controlled scope (v_controls); domain "(all)": fleet-wide.',
            labels=["fleet", "domain"],
        )
        for (fleet, domain), control in sorted(snapshot.controls.items()):
            sample = getattr(control, value)
            if sample is not None:
                family.add_metric([fleet, domain], int(sample))
        yield family


def _forecast_families(snapshot: GaugeSnapshot) -> Iterator[Metric]:
    opened = GaugeMetricFamily(
        "work_ledger_open_units",
        'Units not done or abandoned, per domain; "(all)": every domain (v_forecast).',
        labels=["domain"],
    )
    days = GaugeMetricFamily(
        "work_ledger_forecast_days",
        "Days until the open units are done at the pace of the 28 UTC days before today "
        '(v_forecast): quantile "0.5" is P50, "0.85" P85. No sample while the scope has '
        "fewer than 7 days of history, or its percentile day disposed nothing.",
        labels=["domain", "quantile"],
    )
    for domain, forecast in sorted(snapshot.forecast.items()):
        opened.add_metric([domain], forecast.open_units)
        for quantile, value in (("0.5", forecast.days_p50), ("0.85", forecast.days_p85)):
            if value is not None:
                days.add_metric([domain, quantile], value)
    yield opened
    yield days


def _filled(family: Family, values: dict[str, int]) -> Family:
    """`family` with one sample per value, labelled by its key, in label order."""
    for label, value in sorted(values.items()):
        family.add_metric([label], value)
    return family


class LedgerMetrics:
    """One registry per application (so tests can run several apps in one process)."""

    def __init__(self, *, cache_seconds: float = CACHE_SECONDS) -> None:
        self.cache_seconds = cache_seconds
        self.registry = CollectorRegistry()
        self.request_duration = Histogram(
            "work_ledger_request_duration_seconds",
            "HTTP request latency by method, route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            "work_ledger_refusals",
            "Requests answered with a problem (4xx/5xx), by error code and violated invariant.",
            ["code", "invariant"],
            registry=self.registry,
        )
        self.claim_responses = Counter(
            "work_ledger_claim_responses",
            "Claim answers: new (a new attempt), resumed (the caller's own live claim), "
            "none (nothing claimable).",
            ["result"],
            registry=self.registry,
        )
        self.otlp_dropped = Counter(
            "work_ledger_otlp_records_dropped",
            "Claude Code api_request records sent to /otlp/v1/logs that did not count: no or "
            "an unknown wl.attempt_id, another agent's attempt, or no usable figures.",
            registry=self.registry,
        )
        self.read_errors = Counter(
            "work_ledger_read_errors",
            "Scrapes whose query of the views failed; the previous values were served.",
            registry=self.registry,
        )
        self.snapshot: GaugeSnapshot | None = None
        self._taken_at = float("-inf")
        self._lock = asyncio.Lock()
        self.registry.register(_ViewCollector(self))

    async def refresh(self, conn: Pool | asyncpg.Connection) -> None:
        """Re-read the views unless the snapshot is fresh; concurrent scrapes share a read."""
        if time.monotonic() - self._taken_at < self.cache_seconds:
            return
        async with self._lock:
            if time.monotonic() - self._taken_at < self.cache_seconds:
                return
            try:
                async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                    self.snapshot = await read_gauges(conn)
            except (WorkLedgerError, TimeoutError, asyncpg.PostgresError):
                self.read_errors.inc()
            self._taken_at = time.monotonic()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_problem(self, body: bytes) -> None:
        try:
            problem = json.loads(body)
        except ValueError:
            problem = {}
        if not isinstance(problem, dict):
            problem = {}
        code = str(problem.get("code") or "unknown")
        self.refusals.labels(code, str(problem.get("invariant") or "none")).inc()

    def observe_claim(self, result: str) -> None:
        """Count a claim answer: none, new or resumed (what the route said it answered)."""
        self.claim_responses.labels(result).inc()
