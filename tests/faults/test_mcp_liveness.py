"""Agents on MCP over HTTP keep their units while they live, and only then (real processes).

Leases are short (3 s) so the tests end soon; they assert what happened in which order
(who holds the unit, which attempt, which events), never how fast.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from support.served import Served, StartServer, client, mint
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
LEASE = 3
AGENT = str(Path(__file__).with_name("mcp_agent.py"))
GIVE_UP = 120.0  # seconds: a generous bound on waiting for an event, not a speed claim


class Agent:
    """`mcp_agent.py` as a child process, its JSON lines read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, server: Served, token: str, unit: str, mode: str, *urls: str) -> Agent:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            AGENT,
            mode,
            *(urls or (server.url,)),
            env=dict(server.env, WL_TOKEN=token, WL_UNIT=unit, WL_PING_SECONDS=str(LEASE / 4)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return cls(proc)

    async def next(self, event: str) -> dict[str, Any]:
        """The next line reporting `event` (skipping others)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), GIVE_UP)
            assert line, f"the agent exited before reporting {event!r}"
            found: dict[str, Any] = json.loads(line)
            if found["event"] == event:
                return found

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def holder(raw: asyncpg.Connection, ref: str) -> tuple[str | None, int, str]:
    row = await raw.fetchrow(
        "SELECT claimed_by, attempt_count, state::text FROM work_units WHERE external_ref = $1",
        ref,
    )
    assert row is not None
    return row["claimed_by"], row["attempt_count"], row["state"]


async def rescue(server: Served, token: str, ref: str) -> None:
    """Claim `ref` by name as another agent, retrying while it is held (409)."""
    async with client(server.url, token, timeout=30) as http:
        for _ in range(int(GIVE_UP * 2)):
            answer = await http.post(f"/units/{ref}/claim", json={})
            if answer.status_code == 200:
                return
            assert answer.status_code == 409, answer.text
            await asyncio.sleep(0.5)
    raise AssertionError(f"{ref} was never given back")


async def events_of(raw: asyncpg.Connection, ref: str) -> list[tuple[str, str | None]]:
    rows = await raw.fetch(
        "SELECT e.event_type::text, e.agent_id FROM work_unit_events AS e "
        "JOIN work_units AS u ON u.id = e.unit_id WHERE u.external_ref = $1 "
        "ORDER BY e.created_at, e.id",
        ref,
    )
    return [(r["event_type"], r["agent_id"]) for r in rows]


async def register(server: Served, operator: str, *refs: str) -> None:
    async with client(server.url, operator, timeout=30) as http:
        units = [{"external_ref": ref, "fleet": "f"} for ref in refs]
        assert (await http.post("/units", json={"units": units})).status_code == 200


async def test_mcp_http_units_live_and_die_with_their_agents(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """Closed session: back after its lease. Idle but open for 3 leases: held. SIGKILLed: back."""
    server = await start_server(WL_LEASE_SECONDS=str(LEASE))
    operator, closer, idler, victim, rescuer_1, rescuer_2 = await mint(
        server.env["WL_DATABASE_URL"],
        [(Role.OPERATOR, "op")]
        + [(Role.AGENT, n) for n in ("closer", "idler", "victim", "rescuer-1", "rescuer-2")],
    )
    agents: list[Agent] = []
    try:
        await register(server, operator, "closed", "idle", "killed")
        agents = [
            await Agent.start(server, closer, "closed", "close"),
            await Agent.start(server, idler, "idle", "idle"),
            await Agent.start(server, victim, "killed", "ping"),
        ]  # three processes, started at once
        await agents[0].next("closed")
        await agents[1].next("claimed")
        await agents[2].next("claimed")
        assert (await holder(raw, "killed"))[:2] == ("victim", 1)

        agents[-1].proc.send_signal(signal.SIGKILL)
        await asyncio.gather(
            rescue(server, rescuer_1, "closed"), rescue(server, rescuer_2, "killed")
        )
        assert await holder(raw, "closed") == ("rescuer-1", 2, "claimed")
        assert await holder(raw, "killed") == ("rescuer-2", 2, "claimed")
        for ref, gone, rescuer in (
            ("closed", "closer", "rescuer-1"),
            ("killed", "victim", "rescuer-2"),
        ):
            events = await events_of(raw, ref)
            assert events[:2] == [("registered", "op"), ("claimed", gone)]
            assert events[-1] == ("stale_reclaimed", rescuer)
        # The idle agent's session outlives three of its leases, renewed all along.
        await asyncio.sleep(3 * LEASE)
        assert await holder(raw, "idle") == ("idler", 1, "in_progress")
        idle_events = await events_of(raw, "idle")
        assert idle_events[:2] == [("registered", "op"), ("claimed", "idler")]
        assert idle_events[2:].count(("heartbeat", "idler")) >= 3
        assert agents[1].proc.returncode is None
    finally:
        for agent in agents:
            await agent.stop()


async def test_mcp_http_replica_death_is_not_the_agents(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """The serving replica SIGKILLed: the agent reconnects to another, its unit stays held."""
    first, second = await asyncio.gather(
        start_server(WL_LEASE_SECONDS=str(LEASE)), start_server(WL_LEASE_SECONDS=str(LEASE))
    )
    operator, survivor, rescuer = await mint(
        first.env["WL_DATABASE_URL"],
        [(Role.OPERATOR, "op"), (Role.AGENT, "survivor"), (Role.AGENT, "rescuer")],
    )
    await register(first, operator, "kept")
    agent = await Agent.start(first, survivor, "kept", "ping", first.url, second.url)
    try:
        claimed = await agent.next("claimed")
        assert "Claimed unit kept" in claimed["text"]
        first.kill(signal.SIGKILL)
        lost = await agent.next("lost")
        assert lost["url"] == first.url
        again = await agent.next("claimed")
        assert "Claimed unit kept: " in again["text"]
        assert "attempt 1," in again["text"]

        await asyncio.sleep(3 * LEASE)
        assert await holder(raw, "kept") == ("survivor", 1, "in_progress")
        async with client(second.url, rescuer, timeout=30) as http:
            refused = await http.post("/units/kept/claim", json={})
        assert refused.status_code == 409
        kinds = [kind for kind, _ in await events_of(raw, "kept")]
        assert kinds.count("claimed") == 1
        assert "stale_reclaimed" not in kinds
    finally:
        await agent.stop()
