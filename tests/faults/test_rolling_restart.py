"""A rolling restart of two replicas behind the clients' URL list: each replica in turn gets
SIGTERM (as Kubernetes sends it), drains, exits 0 and starts again on its port, while
agents work units through the SDK. No request fails."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from support.served import Served, StartServer, client, mint
from work_ledger.client.aio import AsyncClient
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
AGENTS = 4
UNITS = 2000


async def _work(
    url: str, token: str, stop: asyncio.Event, lives: list[float], failures: list[str]
) -> None:
    """Claim (long-polling), start, verify and dispose units until told to stop; each
    call that raises is a failed request."""
    async with AsyncClient(url, token) as agent:
        while not stop.is_set():
            try:
                claim = await agent.claim_next(wait_seconds=2)
                if claim.unit is None or claim.attempt is None:
                    continue
                ref, attempt = claim.unit.external_ref, claim.attempt.id
                await agent.start(ref, attempt_id=attempt)
                await agent.verify(ref, "https://ci.example.com/runs/1", attempt_id=attempt)
                await agent.dispose(ref, "MIGRATED", attempt_id=attempt)
                lives.append(time.monotonic())
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")


async def test_a_rolling_restart_behind_the_url_list_fails_no_request(
    start_server: StartServer, database_url: str
) -> None:
    replicas: list[Served] = [await start_server(), await start_server()]
    operator, *tokens = await mint(
        database_url,
        [(Role.OPERATOR, "op")] + [(Role.AGENT, f"roll-{i}") for i in range(AGENTS)],
    )
    async with client(replicas[0].url, operator, timeout=60) as op:
        for first in range(0, UNITS, 1000):
            units = [
                {"external_ref": f"roll/{i}", "fleet": "f"} for i in range(first, first + 1000)
            ]
            assert (await op.post("/units", json={"units": units})).status_code == 200

    urls = ",".join(r.url for r in replicas)
    stop = asyncio.Event()
    lives: list[float] = []
    failures: list[str] = []
    agents = [asyncio.create_task(_work(urls, token, stop, lives, failures)) for token in tokens]
    exits: list[int] = []
    stopping: list[float] = []
    rolled_at: list[tuple[float, float]] = []
    await asyncio.sleep(2.0)
    for replica in replicas:
        assert replica.proc is not None
        began = time.monotonic()
        replica.proc.send_signal(signal.SIGTERM)
        exits.append(await asyncio.to_thread(replica.proc.wait, 60))
        stopping.append(time.monotonic() - began)
        await replica.start()  # the same port: the URL list stays right
        rolled_at.append((began, time.monotonic()))
        await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*agents)

    during = [t for t in lives if any(a <= t <= b for a, b in rolled_at)]
    print(
        f"\nrolling restart of 2 replicas: exit statuses {exits}, each stopped "
        f"{', '.join(f'{s:.2f}' for s in stopping)} s after SIGTERM; {len(lives)} unit lives "
        f"(4 requests each) completed, {len(during)} while a replica was down; "
        f"failed requests: {len(failures)}"
    )
    assert exits == [0, 0]
    assert failures == []
    assert during, "no unit was worked while a replica was down: the roll proved nothing"
