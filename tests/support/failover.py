"""A database failover under load: SIGKILL of the primary, promotion of the standby.

`run_failover` drives agents through `work-ledger serve` on a multi-host
`WL_DATABASE_URL` (`target_session_attrs=read-write`), holds a keyed claim on the primary
after it reserved its key, lets the standby fall behind (the primary's WAL sender stopped,
as on a broken link), kills the primary, promotes the standby, retries that claim under its key,
and holds every recorded request against the promoted server. The test
(`test_database_failover.py`, synchronous standby) and `bench.ha failover` (both settings)
run it.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass

import asyncpg
import httpx

from support.history import Report, check
from support.pgcluster import Pair
from support.served import StartServer, audit, client, mint
from support.workload import Chaos, Op, Recorder, Workload
from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES
from work_ledger.service.tokens import Role

AGENTS = 8
UNITS = 400
CUT_KEY = "cut-off-by-the-failover"
DECOY = "fo-decoy"
BLOCKED_BY = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"


@dataclass
class Failover:
    report: Report
    audit_code: int
    audit_out: str
    statuses: dict[int | None, int]
    first_ack_after_promotion: float  # seconds from `pg_ctl promote` returning
    slowest_request: float
    cut_status: int  # the same-key retry of the claim cut off by the kill
    cut_retry_seconds: float
    acked_after: int

    def summary(self) -> str:
        return (
            f"{self.report.summary()}\nstatuses: {dict(sorted(self.statuses.items(), key=str))}"
            f"\nfirst 2xx {self.first_ack_after_promotion:.2f}s after the promotion; "
            f"{self.acked_after} writes acknowledged after it; slowest request "
            f"{self.slowest_request:.2f}s\nsame-key retry of the claim cut off by the kill: "
            f"{self.cut_status} in {self.cut_retry_seconds:.2f}s\naudit: {self.audit_out}"
        )


def _claim(recorder: Recorder, http: httpx.AsyncClient, first: int | None = None) -> Awaitable[Op]:
    """The cutter's keyed claim, recorded for the history checker like any agent's."""
    return recorder.call(
        http, "cutter", "claim", "POST", "/units/claim", body={}, key=CUT_KEY, first=first
    )


async def _hold_decoy(pair: Pair, database: str) -> asyncpg.Connection:
    """An uncommitted claim of the DECOY unit for the cutter: the agents' claims skip the
    locked row, and the cutter's own claim, once it has reserved its key and claims a
    unit, waits on the agent's one-live-claim index entry; nothing else waits."""
    holder: asyncpg.Connection = await connect(pair.primary.url(database))
    await holder.execute("BEGIN")
    decoy = await holder.fetchval("SELECT id FROM work_units WHERE external_ref = $1", DECOY)
    await holder.fetchrow(QUERIES["claim_unit"], "cutter", None, 3600, decoy)
    return holder


async def _cut_off_claim(
    holder: asyncpg.Connection, pair: Pair, http: httpx.AsyncClient, recorder: Recorder, lag: float
) -> Op:
    """Send the keyed claim, wait until it waits on the holder, let the standby fall
    behind for `lag` seconds while the agents write on, and kill the primary."""
    claim = asyncio.ensure_future(_claim(recorder, http))
    me = await holder.fetchval("SELECT pg_backend_pid()")
    deadline = time.monotonic() + 30
    while await holder.fetchval(BLOCKED_BY, me) == 0:
        assert time.monotonic() < deadline, "the claim never came to wait on the holder"
        await asyncio.sleep(0.02)
    await _standby_behind(pair, lag)
    answer = await claim
    assert answer.status == 503, answer.response
    holder.terminate()
    return answer


async def _standby_behind(pair: Pair, seconds: float) -> None:
    """Stop the primary's WAL sender for `seconds` (a slow or broken link: nothing more
    reaches the standby), then kill the primary. A synchronous primary acknowledges no
    commit meanwhile; an asynchronous one goes on acknowledging."""
    pair.primary.walsender().send_signal(signal.SIGSTOP)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(pair.primary.kill)


async def run_failover(
    pair: Pair,
    database: str,
    start_server: StartServer,
    *,
    load_seconds: float = 3.0,
    lag_seconds: float = 0.5,
) -> Failover:
    url = pair.multi_host_url(database)
    server = await start_server(url)
    names = [f"failover-agent-{i}" for i in range(AGENTS)]
    operator, triage, cutter, *tokens = await mint(
        pair.primary.url(database),
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage"), (Role.AGENT, "cutter")]
        + [(Role.AGENT, n) for n in names],
    )
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"fo-{i}", "fleet": "f"} for i in range(UNITS)]
        units.insert(0, {"external_ref": DECOY, "fleet": "f"})
        assert (await op.post("/units", json={"units": units})).status_code == 200
    holder = await _hold_decoy(pair, database)
    chaos = Chaos(client_timeout=0.0, die=0.0, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage, chaos=chaos)
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(load_seconds)

    async with client(server.url, cutter, timeout=30) as http:
        cut = await _cut_off_claim(holder, pair, http, workload.recorder, lag_seconds)
        await asyncio.to_thread(pair.standby.promote)
        promoted_at = time.monotonic()
        retry = await _claim(workload.recorder, http, first=cut.n)
    await asyncio.sleep(load_seconds)
    workload.stop.set()
    await load

    ops = workload.recorder.ops
    after = [o for o in ops if o.acked and o.kind != "read" and o.ended > promoted_at]
    statuses: dict[int | None, int] = {}
    for o in ops:
        statuses[o.status] = statuses.get(o.status, 0) + 1
    conn: asyncpg.Connection = await connect(pair.standby.url(database))
    try:
        report = await check(conn, workload.recorder)
    finally:
        await conn.close()
    code, out = await audit(server.env)
    return Failover(
        report=report,
        audit_code=code,
        audit_out=out.strip(),
        statuses=statuses,
        first_ack_after_promotion=min((o.ended for o in after), default=float("inf")) - promoted_at,
        slowest_request=max(o.seconds for o in ops),
        cut_status=retry.status or 0,
        cut_retry_seconds=retry.seconds,
        acked_after=len(after),
    )
