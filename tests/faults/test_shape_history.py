"""The work's shape and money under faults, held against the history (issues 28 and 29).

Two `serve` replicas on one database; 12 agents, triage and an operator (ShapedWorkload:
prerequisites in chains and diamonds registered by racing batches, splits, waivers,
poison units parked at their attempt limit and answered, budgets spent and raised, cost by
model and tokens), with the faults of the history workload (agents dying silently, so
their leases lapse and are reclaimed; 1-40 ms client timeouts retried under their key;
same-key duplicates) and one replica SIGKILLed mid-run and restarted. The checkers
(history.py, shape_history.py) and `work-ledger audit` must find nothing.

WL_HISTORY_REQUESTS sets how many recorded requests the run reaches before it stops
(default 3,000 for CI; docs/reliability.md quotes a run of >= 10,000).
"""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import os
import time

import asyncpg
import pytest

from support.history import check
from support.replicas import (  # noqa: F401  (a fixture)
    Failover,
    StartReplicas,
    start_replicas,
    through_a_replica_kill,
)
from support.served import audit, mint_fleet
from support.shape_history import check_shape
from support.shape_rows import load
from support.shaped_workload import ShapedWorkload
from support.workload import Chaos

pytestmark = pytest.mark.faults
AGENTS = 12
REQUESTS = int(os.environ.get("WL_HISTORY_REQUESTS", "3000"))


async def test_shape_and_money_under_faults_keep_every_promise(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection
) -> None:
    """0 claims with an unfinished prerequisite, 0 stranded, 0 claims past a spent budget,
    0 attempts past the allowance, costs equal to their records; audit clean."""
    replicas = await start_replicas(2)
    urls = [r.url for r in replicas]
    names = [f"shaper-{i:02d}" for i in range(AGENTS)]
    operator, triage, agents = await mint_fleet(database_url, names)
    workload = ShapedWorkload(
        urls[0],
        agents,
        triage,
        operator=operator,
        chaos=Chaos(die=0.04, block=0.08, refused=0.2),
        transport=lambda index: Failover(urls, first=index),
    )
    workload.doomed = {names[0], names[1]}  # two early deaths: reclaims are certain
    started = time.monotonic()
    recorder = await through_a_replica_kill(  # inside pytest-timeout's 300 s
        workload,
        replicas[1],
        kill_after=REQUESTS * 0.4,
        rich_enough=lambda: _rich_enough(raw, workload),
        seconds=240,
    )
    seconds = time.monotonic() - started

    base = await check(raw, recorder)
    shape = check_shape(await load(raw), recorder.ops)
    code, out = await audit(replicas[0].env)
    no_answer = sum(1 for op in recorder.ops if op.status is None)
    print(
        f"\n{base.summary()}\n{shape.summary()}\nfaults: {workload.deaths} agent deaths "
        f"(leases lapsed), 1 replica SIGKILLed, {no_answer} requests without an answer, "
        f"{base.timeouts} client timeouts; cap raises {workload.counts['cap raises']}; "
        f"{len(recorder.ops)} requests in {seconds:.0f} s\naudit: {out.strip()}"
    )
    assert base.violations == []
    assert shape.violations == []
    assert code == 0, out
    assert len(recorder.ops) >= REQUESTS


async def _rich_enough(raw: asyncpg.Connection, workload: ShapedWorkload) -> bool:
    """Enough requests, and each thing the checks are about has happened at least once."""
    if len(workload.recorder.ops) < REQUESTS:
        return False
    seen = {
        row["event_type"]
        for row in await raw.fetch(
            "SELECT DISTINCT event_type FROM work_unit_events"
            " WHERE event_type IN ('split', 'waived', 'stale_reclaimed')"
            "    OR (event_type = 'released' AND to_state = 'waiting')"
            "    OR (event_type = 'unblocked' AND from_state = 'waiting')"
        )
    }
    refused = {op.refusal for op in workload.recorder.ops if op.status == 409}
    return (
        {"split", "waived", "stale_reclaimed", "released", "unblocked"} <= seen
        and workload.counts["cap raises"] > 0
        and "budget_exhausted" in refused
    )
