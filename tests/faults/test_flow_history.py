"""Caps, exclusion keys and pauses under faults, held against the history (issue 38).

Two `serve` replicas on one database; 12 agents, triage and an operator steering the fleet
(FlowWorkload: a fleet cap lowered under load and raised, a domain cap of 2, a domain
paused and resumed, a fleet paused while its domain says not, units sharing keys in
overlapping pairs), with the faults of the history workload (agents dying silently, so
their leases lapse and their units, keys held, are reclaimed; 1-40 ms client timeouts
retried under their key; same-key duplicates) and one replica SIGKILLed mid-run and
restarted. The flow checker (flow_history.py), the history checker and `work-ledger audit`
must find nothing; then the same rows, doctored, must make each flow rule fail.

WL_FLOW_REQUESTS sets how many recorded requests the run reaches (default 2,500); the
slow test runs 10,000 (WL_SLOW_TESTS=1; docs/reliability.md quotes it).
"""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time

import asyncpg
import pytest

from support.flow_history import (
    FlowRows,
    check_flow,
    control_after,
    load_flow,
    note_top_transactions,
)
from support.flow_workload import FlowWorkload, Sample, Snapshots, parse_snapshot
from support.history import check
from support.replicas import (  # noqa: F401  (a fixture)
    Failover,
    StartReplicas,
    start_replicas,
    through_a_replica_kill,
)
from support.served import audit, mint_fleet
from support.workload import Chaos, Op

pytestmark = pytest.mark.faults
AGENTS = 12
PAUSED = frozenset({"paused", "scope_paused"})
KEY_HELD = frozenset({"exclusive_key_held"})
REQUESTS = int(os.environ.get("WL_FLOW_REQUESTS", "2500"))


async def test_flow_controls_under_faults_keep_every_promise(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection
) -> None:
    """0 admissions past a cap, 0 keys with two holders, 0 claims after a pause, 0 pull-nexts
    answered empty with a unit claimable; and each rule fails on doctored rows."""
    await _run(start_replicas, database_url, raw, REQUESTS, plant=True)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("WL_SLOW_TESTS"), reason="slow: set WL_SLOW_TESTS=1")
@pytest.mark.timeout(900)
async def test_flow_controls_over_ten_thousand_requests(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection
) -> None:
    """The same over at least 10,000 recorded requests."""
    await _run(start_replicas, database_url, raw, 10_000, plant=False)


async def _run(
    start_replicas: StartReplicas,
    database_url: str,
    raw: asyncpg.Connection,
    requests: int,
    *,
    plant: bool,
) -> None:
    await note_top_transactions(raw)
    replicas = await start_replicas(2)
    urls = [r.url for r in replicas]
    names = [f"steered-{i:02d}" for i in range(AGENTS)]
    operator, triage, agents = await mint_fleet(database_url, names)
    workload = FlowWorkload(
        urls[0],
        agents,
        triage,
        operator=operator,
        chaos=Chaos(die=0.05, block=0.1, refused=0.15),
        transport=lambda index: Failover(urls, first=index),
    )
    workload.doomed = {names[0], names[1]}  # two early deaths: reclaims are certain
    snapshots = Snapshots(database_url)
    sampler = asyncio.create_task(snapshots.run())
    started = time.monotonic()
    recorder = await through_a_replica_kill(
        workload,
        replicas[1],
        kill_after=requests * 0.4,
        rich_enough=lambda: _rich_enough(raw, workload, requests),
        seconds=240 if requests < 10_000 else 800,
    )
    snapshots.stop.set()
    await sampler
    seconds = time.monotonic() - started

    base = await check(raw, recorder)
    rows = await load_flow(raw)
    flow = check_flow(rows, snapshots.samples, recorder.ops)
    code, out = await audit(replicas[0].env)
    no_answer = sum(1 for op in recorder.ops if op.status is None)
    print(
        f"\n{base.summary()}\n{flow.summary()}\nfaults: {workload.deaths} agent deaths "
        f"(leases lapsed), 1 replica SIGKILLed, {no_answer} requests without an answer, "
        f"{base.timeouts} client timeouts; {workload.counts['control changes']} control "
        f"changes; {len(recorder.ops)} requests in {seconds:.0f} s\naudit: {out.strip()}"
    )
    assert base.violations == []
    assert flow.violations == []
    assert code == 0, out
    assert len(recorder.ops) >= requests
    if plant:
        _planted_violations_are_found(rows, snapshots.samples, recorder.ops)


async def test_a_savepoints_row_is_seen_once_its_transaction_commits(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """The checker's premise, where `xmin` breaks it: a row written in a savepoint (a keyed
    claim that lost a race) has its subtransaction's id, which no snapshot lists as in
    progress; its top-level transaction's id is."""
    await note_top_transactions(raw)
    insert = (
        "INSERT INTO control_events (fleet, actor, after, reason)"
        " VALUES ($1, 'op', '{}', 'the premise of the checker')"
    )
    writer = await asyncpg.connect(database_url)
    try:
        async with writer.transaction():
            await writer.execute("SELECT pg_current_xact_id()")  # its top-level id first
            async with writer.transaction():  # a savepoint, released
                await writer.execute(insert, "saved")
            await raw.execute(insert, "later")  # committed: the snapshot's xmax passes ours
            during = await raw.fetchval("SELECT pg_current_snapshot()::text")
        after = await raw.fetchval("SELECT pg_current_snapshot()::text")
    finally:
        await writer.close()
    saved = next(c for c in (await load_flow(raw)).controls if c["fleet"] == "saved")
    assert not parse_snapshot(during, 0, 0).sees(saved["xid"])
    assert parse_snapshot(after, 0, 0).sees(saved["xid"])


def test_a_scope_at_its_cap_between_two_samples_excuses_an_empty_answer() -> None:
    """Live 2 of a cap of 3; between two samples one unit comes in (the scope is full) and
    two leave. A pull-next answered "nothing" in that window broke no promise, though the
    count at both samples left room; the rule fails when the cap is 4."""
    units = [{"id": u, "external_ref": u, "fleet": "f", "domain": "d", "exclusive": None}
             for u in "ABCR"]  # fmt: skip

    def event(n: int, unit: str, kind: str, was: str | None, to: str, xid: int) -> dict:
        return {"id": n, "unit_id": unit, "event_type": kind, "from_state": was,
                "to_state": to, "xid": xid}  # fmt: skip

    events = [
        *(event(i, u, "registered", None, "ready", 11) for i, u in enumerate("ABCR", 1)),
        event(5, "B", "claimed", "ready", "claimed", 12),
        event(6, "C", "claimed", "ready", "claimed", 13),
        event(7, "A", "claimed", "ready", "claimed", 20),  # at the cap, between the samples
        event(8, "B", "released", "claimed", "ready", 21),
        event(9, "C", "released", "claimed", "ready", 22),
    ]
    samples = [Sample(t, t + 0.1, x, x, frozenset()) for t, x in ((0, 15), (1, 30), (2, 40))]
    empty = Op(1, "x", "claim", "POST", "/units/claim", {}, "k", 1, 0.5, 0.6, 200,
               {"unit": None, "attempt": None}, False, None)  # fmt: skip

    def found(cap: int) -> list[str]:
        control = {"id": 1, "fleet": "f", "domain": None, "xid": 10,
                   "after": json.dumps({"max_live": cap})}  # fmt: skip
        return check_flow(FlowRows(events, units, [control]), samples, [empty]).violations

    assert found(3) == []
    assert any("answered nothing while 1 units stayed claimable" in v for v in found(4))


async def _rich_enough(raw: asyncpg.Connection, workload: FlowWorkload, requests: int) -> bool:
    """Enough requests, a stale reclaim, and a refusal by each control."""
    if len(workload.recorder.ops) < requests:
        return False
    reclaims = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events WHERE event_type = 'stale_reclaimed'"
    )
    refused = {op.refusal for op in workload.recorder.ops if op.status == 409}
    return reclaims > 0 and bool(refused & PAUSED) and bool(refused & KEY_HELD)


def _planted_violations_are_found(rows: FlowRows, samples: list, ops: list) -> None:
    """Each rule of the checker fails when the run's own rows are doctored."""
    # Keys: every unit of fleet f shares one key (several were held at once).
    shared = [{**u, "exclusive": ["planted"]} if u["fleet"] == "f" else u for u in rows.units]
    found = check_flow(dataclasses.replace(rows, units=shared), samples, ops).violations
    assert any("key 'planted'" in v for v in found), found[:3]
    # Caps: the fleet's cap was 1 all along.
    capped = [_with(c, max_live=1) if c["domain"] is None and c["fleet"] == "f" else c
              for c in rows.controls]  # fmt: skip
    found = check_flow(dataclasses.replace(rows, controls=capped), samples, ops).violations
    assert any("past its cap of 1" in v for v in found), found[:3]
    # Pauses: fleet f was paused from its first control on.
    paused = [_with(c, paused=True) if c["fleet"] == "f" else c for c in rows.controls]
    found = check_flow(dataclasses.replace(rows, controls=paused), samples, ops).violations
    assert any("after the pause of ('f', None)" in v for v in found), found[:3]
    # Stranded: every pull-next that got a unit is told it got nothing.
    emptied = [
        dataclasses.replace(op, response={**op.response, "unit": None, "attempt": None})
        if op.kind == "claim" and op.acked and op.response.get("unit")
        else op
        for op in ops
    ]
    found = check_flow(rows, samples, emptied).violations
    assert any("answered nothing while" in v for v in found), found[:3]


def _with(control: dict, **after: object) -> dict:
    return {**control, "after": json.dumps({**control_after(control["after"]), **after})}
