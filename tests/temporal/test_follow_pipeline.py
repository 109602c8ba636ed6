"""The shape of a pass: a batch is delivered once its workflows are read, before the pass
has read everything; the checkpoint moves only after the last batch; the whole overlap is
swept again only every half overlap."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from temporalio.client import Client

from support.temporal_support import ids, register, settle, start, worker
from work_ledger.service.ledger import Ledger
from work_ledger.temporal import follower as follower_module
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.executions import Run, TemporalReader
from work_ledger.temporal.follower import Follower, FollowSettings
from work_ledger.temporal.forwarder import LedgerForwarder


class _OneResultHeld(TemporalReader):
    """The real reader of the real server; one workflow's result is read only once
    `release` is set, so the test decides when that read ends."""

    def __init__(self, client: Client, held: str) -> None:
        super().__init__(client)
        self.held = held
        self.release = asyncio.Event()

    async def result(self, run: Run) -> object:
        if run.workflow_id == self.held:
            await self.release.wait()
        return await super().result(run)


async def _states(ledger: Ledger, names: dict[str, str]) -> dict[str, str]:
    return {name: str((await ledger.get_unit(f"unit-{w}")).unit.state) for name, w in names.items()}


async def test_a_batch_is_delivered_while_the_pass_still_reads(
    ledger: Ledger,
    served,
    temporal_address: str,
    namespace: str,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follower_module, "BATCH", 2)  # one workflow's start and close
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("slow", "first", "second")
    await register(ledger, *names.values())
    async with worker(client) as queue:
        await settle([await start(client, queue, w, "complete") for w in names.values()])
    listed = " OR ".join(f"WorkflowId = '{w}'" for w in names.values())
    async with asyncio.timeout(60):  # visibility lists the closes a little later
        while True:
            query = f"ExecutionStatus = 'Completed' AND ({listed})"
            if (await client.count_workflows(query)).count == 3:
                break
            await asyncio.sleep(0.2)
    reader = _OneResultHeld(client, names["slow"])
    state = FollowState(database_url)
    follow = Follower(
        reader,
        state,
        LedgerForwarder(served.url, served.projector_token),
        namespace=namespace,
        settings=FollowSettings(lag=0.0),
    )
    passing = asyncio.create_task(follow.run_pass(describe=False))
    try:
        async with asyncio.timeout(60):
            while True:
                states = await _states(ledger, names)
                if "verified" in states.values():
                    break
                await asyncio.sleep(0.05)
        assert states["slow"] == "ready"
        assert not passing.done()
        assert await state.checkpoint(namespace) is None
    finally:
        reader.release.set()
    report = await passing
    assert await _states(ledger, names) == dict.fromkeys(names, "verified")
    assert report.counts["applied"] == 6  # the namespace may hold other tests' runs too
    assert await state.checkpoint(namespace) == report.hi
    assert await ledger.audit() == []


async def test_only_every_half_overlap_a_pass_sweeps_the_whole_overlap_again(
    served, temporal_address: str, namespace: str, database_url: str
) -> None:
    """Between two full sweeps a pass sweeps again only the last RECENT seconds before the
    checkpoint, so a burst's passes do not read the last minute's closes over and over;
    half an overlap after the last full sweep, a pass sweeps the whole overlap again."""
    client = await Client.connect(temporal_address, namespace=namespace)
    now = [dt.datetime.now(dt.UTC)]
    follow = Follower(
        TemporalReader(client),
        FollowState(database_url),
        LedgerForwarder(served.url, served.projector_token),
        namespace=namespace,
        settings=FollowSettings(lag=0.0, overlap=60.0),
        clock=lambda: now[0],
    )
    passes = []
    for step in (0, 10, 10, 15):  # seconds since the pass before
        now[0] += dt.timedelta(seconds=step)
        passes.append(await follow.run_pass(describe=False))
    swept = [(p.full_sweep, (p.hi - p.lo).total_seconds()) for p in passes[1:]]
    recent = follower_module.RECENT
    assert swept == [(False, 10 + recent), (False, 10 + recent), (True, 15 + 60.0)]
