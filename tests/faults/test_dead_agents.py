"""Agents that die silently: `work-ledger run` processes killed with SIGKILL mid-unit."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time

import asyncpg
import pytest

from support.served import WORK_LEDGER, StartServer, audit, client, mint
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
AGENTS = 6
DEAD = 3


async def _held(raw: asyncpg.Connection, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        held = await raw.fetchval(
            "SELECT count(*) FROM work_units WHERE state IN ('claimed', 'in_progress')"
        )
        if held == count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the agents did not all claim a unit (held: {held})")


async def test_dead_agents_units_come_back_after_their_lease(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """SIGKILL three of six agents: exactly their units are stale-reclaimed, attempts superseded."""
    server = await start_server()
    names = [f"runner-{i}" for i in range(AGENTS)]
    operator, rescuer, *tokens = await mint(
        server.env["WL_DATABASE_URL"],
        [(Role.OPERATOR, "op"), (Role.AGENT, "rescuer")] + [(Role.AGENT, n) for n in names],
    )
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"dead-{i}", "fleet": "f"} for i in range(AGENTS)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    dead = set(random.Random(8).sample(names, DEAD))
    runners: dict[str, asyncio.subprocess.Process] = {}
    for name, token in zip(names, tokens, strict=True):
        # The survivors heartbeat a 10 s lease every 3.3 s: 6.7 s of slack on a busy machine.
        lease = "1" if name in dead else "10"
        runners[name] = await asyncio.create_subprocess_exec(
            *(WORK_LEDGER, "run", "--lease", lease, "--", "sleep", "120"),
            env=dict(server.env, WL_URL=server.url, WL_TOKEN=token),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # its own process group: run and its CMD die together
        )
    try:
        await _held(raw, AGENTS)
        for name in dead:
            os.killpg(runners[name].pid, signal.SIGKILL)
            await runners[name].wait()
        await asyncio.sleep(1.5)  # past the dead agents' 1 s lease

        reclaimed = []
        async with client(server.url, rescuer, timeout=30) as http:
            for k in range(DEAD + 1):
                response = await http.post(
                    "/units/claim",
                    json={"lease_seconds": 30},
                    headers={"X-WL-Agent": f"rescuer/{k}"},
                )
                assert response.status_code == 200, response.text
                reclaimed.append(response.json()["unit"])
        assert reclaimed[-1] is None  # the survivors' units are not up for grabs
        rows = await raw.fetch(
            "SELECT e.detail->>'previous_agent' AS dead, e.agent_id AS rescuer, a.outcome "
            "FROM work_unit_events AS e JOIN work_unit_attempts AS a "
            "ON a.id = (e.detail->>'superseded_attempt_id')::uuid "
            "WHERE e.event_type = 'stale_reclaimed'"
        )
        assert {r["dead"] for r in rows} == dead
        assert {r["outcome"] for r in rows} == {"superseded"}
        assert {r["rescuer"] for r in rows} == {f"rescuer/{k}" for k in range(DEAD)}
        survivors = await raw.fetch(
            "SELECT u.claimed_by FROM work_units AS u JOIN work_unit_attempts AS a "
            "ON a.unit_id = u.id AND a.outcome IS NULL WHERE u.claimed_by = a.agent_id"
        )
        assert {r["claimed_by"] for r in survivors} == (set(names) - dead) | {
            f"rescuer/{k}" for k in range(DEAD)
        }
    finally:
        for proc in runners.values():
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
    code, out = await audit(server.env)
    print(f"\nSIGKILLed {DEAD} of {AGENTS} agents: {len(rows)} units stale-reclaimed; audit: {out}")
    assert code == 0, out
