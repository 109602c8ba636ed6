"""A fault of the Patroni cluster under the history-checked workload, and what it cost.

`run_fault` starts `work-ledger serve` on the cluster's multi-host URL
(`target_session_attrs=read-write`), drives the agents of `workload.py`, injects one fault
(a callable run in a thread), waits for the ledger to take writes again, runs on, and
holds every recorded request against whichever member leads at the end. It measures what
the HA suite (tests/ha/test_patroni.py) asserts and docs/high-availability.md reports:
acknowledged writes lost, seconds from the fault to the first 2xx after the outage began,
the slowest request, and the answers in between.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from support.history import Report, check
from support.patroni import Cluster
from support.served import StartServer, audit, client, mint
from support.workload import Chaos, Op, Workload
from work_ledger.db.connect import connect
from work_ledger.service.tokens import Role

AGENTS = 6
UNITS = 600
# Past this, the ledger never came back: the run stops and the test fails on it.
RECOVERY_BOUND_SECONDS = 120.0


@dataclass
class Outcome:
    fault: str
    report: Report
    audit_code: int
    audit_out: str
    statuses: Counter[int | None]
    first_failure: float | None  # seconds from the fault to the first non-2xx answer
    first_2xx: float  # seconds from the fault to the first 2xx sent after that
    last_failure: float | None
    slowest: float
    acked_after: int

    @property
    def lost(self) -> list[str]:
        return [v for v in self.report.violations if v.startswith("acknowledged but not")]

    def summary(self) -> str:
        def s(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        return (
            f"== {self.fault}: {len(self.lost)} acknowledged writes lost; first failure "
            f"{s(self.first_failure)}, first 2xx after it {s(self.first_2xx)}, last failure "
            f"{s(self.last_failure)} after the fault; slowest request {self.slowest:.2f}s; "
            f"statuses {dict(sorted(self.statuses.items(), key=str))}; {self.acked_after} "
            f"writes acknowledged after the outage\n{self.report.summary()}\n"
            f"audit: {self.audit_code} {self.audit_out}"
        )


def _failed(op: Op) -> bool:
    """An answer that says "not now": a 503, or no answer at all."""
    return op.status is None or op.status >= 500


def _measure(ops: list[Op], fault_at: float) -> tuple[float | None, float, float | None]:
    after = [o for o in ops if o.ended >= fault_at]
    failures = [o.ended - fault_at for o in after if _failed(o)]
    first_failure = min(failures, default=None)
    outage = fault_at + (first_failure or 0.0)
    acks = [o.ended for o in after if o.acked and o.method == "POST" and o.started >= outage]
    first_2xx = min(acks, default=float("inf")) - fault_at
    return first_failure, first_2xx, max(failures, default=None)


async def _until_recovered(cluster: Cluster, ops: list[Op], fault_at: float) -> None:
    """Wait until a write started after the first failure (or after the fault) is acked."""
    deadline = fault_at + RECOVERY_BOUND_SECONDS
    while time.monotonic() < deadline:
        if _measure(ops, fault_at)[1] != float("inf"):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"no write acknowledged since the fault: {cluster.roles()}\n{cluster.logs()}"
    )


async def _leader_connection(cluster: Cluster, database: str) -> asyncpg.Connection:
    """A connection to the leader, to read the history from; waited for, should the cluster
    be between leaders, and what it showed meanwhile is printed."""
    deadline = time.monotonic() + RECOVERY_BOUND_SECONDS
    while True:
        try:
            return await connect(cluster.url(database))
        except (OSError, asyncpg.PostgresError) as exc:
            print(f"no leader to read the history from ({exc!r}): {cluster.roles()}")
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


async def _setup(cluster: Cluster, database: str, url: str) -> tuple[list[str], str, str]:
    """Tokens for the agents, triage and an operator; the units registered."""
    names = [f"ha-agent-{i}" for i in range(AGENTS)]
    operator, triage, *tokens = await mint(
        cluster.url(database),
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names],
    )
    async with client(url, operator, timeout=30) as op:
        units = [{"external_ref": f"ha-{i}", "fleet": "f"} for i in range(UNITS)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    return tokens, triage, operator


async def run_fault(
    cluster: Cluster,
    database: str,
    start_server: StartServer,
    fault: Callable[[], object],
    name: str,
    *,
    load_seconds: float = 4.0,
    url: str | None = None,
) -> Outcome:
    """`url`: how the ledger reaches the leader (default: every member, libpq-style)."""
    server = await start_server(url or cluster.url(database))
    tokens, triage, _ = await _setup(cluster, database, server.url)
    names = [f"ha-agent-{i}" for i in range(AGENTS)]
    chaos = Chaos(client_timeout=0.0, die=0.0, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage, chaos=chaos)
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(load_seconds)
    fault_at = time.monotonic()
    await asyncio.to_thread(fault)
    await _until_recovered(cluster, workload.recorder.ops, fault_at)
    await asyncio.sleep(load_seconds)
    workload.stop.set()
    await load

    ops = workload.recorder.ops
    first_failure, first_2xx, last_failure = _measure(ops, fault_at)
    conn = await _leader_connection(cluster, database)
    try:
        report = await check(conn, workload.recorder)
    finally:
        await conn.close()
    code, out = await audit(server.env)
    recovered = fault_at + first_2xx
    return Outcome(
        fault=name,
        report=report,
        audit_code=code,
        audit_out=out.strip()[-500:],
        statuses=Counter(o.status for o in ops),
        first_failure=first_failure,
        first_2xx=first_2xx,
        last_failure=last_failure,
        slowest=max(o.seconds for o in ops),
        acked_after=sum(1 for o in ops if o.acked and o.method == "POST" and o.ended > recovered),
    )
