"""A replica SIGKILLed under load: agents fail over to the others and lose nothing."""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import asyncio
import signal
import time

import asyncpg
import pytest

from support.history import check
from support.replicas import Failover, StartReplicas, start_replicas  # noqa: F401  (shared fixture)
from support.served import audit, client, mint_fleet
from support.workload import Chaos, Workload

pytestmark = pytest.mark.faults
AGENTS = 9
REPLICAS = 3


async def test_replica_killed_under_load_loses_nothing(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection
) -> None:
    """3 replicas, agents spread over them; SIGKILL one, restart it: 0 violations, audit clean,
    and the dead replica's agents carried on through the others before it came back."""
    replicas = await start_replicas(REPLICAS)
    urls = [r.url for r in replicas]
    names = [f"spread-{i}" for i in range(AGENTS)]
    operator, triage, agents = await mint_fleet(database_url, names)
    async with client(urls[0], operator, timeout=30) as op:
        units = [{"external_ref": f"spread-{i}", "fleet": "f"} for i in range(300)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    transports: dict[int, Failover] = {}

    def transport(index: int) -> Failover:
        transports[index] = Failover(urls, first=index)
        return transports[index]

    chaos = Chaos(client_timeout=0.0, die=0.0, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(urls[0], agents, triage, chaos=chaos, transport=transport)
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(2.0)
    victim = replicas[1]
    killed_at = time.monotonic()
    victim.kill(signal.SIGKILL)
    await asyncio.sleep(2.0)
    await victim.start()
    restarted_at = time.monotonic()  # ready again: from here on it could serve its agents
    await asyncio.sleep(1.5)
    workload.stop.set()
    await load

    report = await check(raw, workload.recorder)
    code, out = await audit(replicas[0].env)
    homed = [names[i] for i in range(AGENTS) if i % REPLICAS == 1]
    carried_on = {}
    for name in homed:
        after = [
            op
            for op in workload.recorder.ops
            if op.agent == name and op.acked and op.started > killed_at
        ]
        carried_on[name] = after[0].ended - killed_at if after else None
    in_doubt = [op for op in workload.recorder.ops if op.in_doubt and op.ended >= killed_at]
    print(
        f"\n{report.summary()}\nagents of the killed replica, first acknowledged write after "
        f"the kill (s): {carried_on}\nrequests the dead replica never answered: {len(in_doubt)}\n"
        f"audit: {out}"
    )
    assert report.violations == []
    assert code == 0, out
    assert in_doubt  # the kill cut requests off, or refused them
    for name, seconds in carried_on.items():  # through failover, not by waiting for the restart
        assert seconds is not None, name
        assert killed_at + seconds < restarted_at, name
    async with client(victim.url, operator) as back:
        assert (await back.get("/units?limit=1")).status_code == 200  # the restarted replica serves
