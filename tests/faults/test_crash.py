"""kill -9 of the API server in the middle of concurrent claims, transitions and costs."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Awaitable

import asyncpg
import httpx
import pytest

from support.history import check
from support.served import Served, StartServer, audit, cli_token, client, mint
from support.workload import Chaos, Workload
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
AGENTS = 10


async def test_kill9_under_load_keeps_every_acknowledged_write(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """SIGKILL mid-load, restart: every 2xx is in the ledger once, nothing else, audit clean."""
    server = await start_server()
    names = [f"crash-agent-{i}" for i in range(AGENTS)]
    operator, triage, *tokens = await mint(
        server.env["WL_DATABASE_URL"],
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names[1:]],
    )
    tokens.insert(0, await cli_token(server.env, Role.AGENT, names[0]))
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"crash-{i}", "fleet": "f"} for i in range(300)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    chaos = Chaos(client_timeout=0.0, die=0.0, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage, chaos=chaos)
    load = asyncio.create_task(workload.run())

    await asyncio.sleep(3.0)
    in_flight_before = len(workload.recorder.ops)
    server.kill(signal.SIGKILL)
    await asyncio.sleep(0.5)
    await server.start()
    await asyncio.sleep(3.0)
    workload.stop.set()
    await load

    report = await check(raw, workload.recorder)
    code, out = await audit(server.env)
    after = [op for op in workload.recorder.ops[in_flight_before:] if op.acked]
    orphans = await _orphaned_reservations(raw)
    print(
        f"\n{report.summary()}\nacknowledged after the kill: {len(after)}\n"
        f"idempotency keys left reserved by the killed server (must be 0): {len(orphans)}\n"
        f"audit: {out}"
    )
    assert report.violations == []
    assert code == 0, out
    assert orphans == []  # a key commits with its write and outcome, or not at all
    assert report.in_doubt > 0  # the kill cut some writes off mid-flight
    assert after  # and the agents carried on against the restarted server

    # Spelled out for costs: each acknowledged cost is exactly one cost_recorded event.
    events = await raw.fetch(
        "SELECT attempt_id::text, cost_delta_cents FROM work_unit_events "
        "WHERE event_type = 'cost_recorded'"
    )
    written = Counter((e["attempt_id"], e["cost_delta_cents"]) for e in events)
    acked = {
        (op.path.split("/")[2], op.body["cost_cents"])  # type: ignore[index]
        for op in workload.recorder.ops
        if op.kind == "cost" and op.acked
    }
    assert acked, "no cost was acknowledged"
    assert all(written[cost] == 1 for cost in acked)
    total = await raw.fetchval("SELECT sum(cost_cents) FROM work_units")
    assert total == sum(cents * n for (_, cents), n in written.items())


async def _orphaned_reservations(raw: asyncpg.Connection) -> list[str]:
    """Idempotency keys reserved by a request that never stored its outcome (it was killed)."""
    rows = await raw.fetch("SELECT key FROM wl_idempotency_keys WHERE status_code IS NULL")
    return [r["key"] for r in rows]


# This test's database only: the other xdist workers' serves share the server and its name.
WAITING_ON_A_LOCK = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND application_name = 'work-ledger' AND wait_event_type = 'Lock'"
)
RETRY_BOUND_SECONDS = 10.0  # expected well under a second; the old takeover took 30 s


async def _killed_mid_write(
    server: Served, raw: asyncpg.Connection, table: str, send: Awaitable[httpx.Response]
) -> None:
    """SIGKILL `server` while the write `send` holds its key: `table` is locked, so the
    write stops after reserving its key and before its answer."""
    async with raw.transaction():
        await raw.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        request = asyncio.ensure_future(send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while await raw.fetchval(WAITING_ON_A_LOCK) == 0:
            assert loop.time() < deadline, "the write never reached the locked table"
            await asyncio.sleep(0.02)
        server.kill(signal.SIGKILL)
        with pytest.raises(httpx.TransportError):
            await request
    # The lock is gone: the orphaned backend finishes its statement, finds its client dead
    # and rolls back: key, write and outcome together.


async def _retried(http: httpx.AsyncClient, path: str, body: object, key: str) -> httpx.Response:
    started = time.monotonic()
    response = await http.post(path, json=body, headers={"Idempotency-Key": key})
    assert time.monotonic() - started < RETRY_BOUND_SECONDS
    assert "Idempotent-Replayed" not in response.headers  # it ran, as for the first time
    again = await http.post(path, json=body, headers={"Idempotency-Key": key})
    assert (again.headers["Idempotent-Replayed"], again.content) == ("true", response.content)
    return response


async def test_keyed_writes_cut_off_by_a_server_kill_are_retried_at_once_and_run_once(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """serve SIGKILLed while a claim, then a cost, holds its key unanswered: each retry
    under the same key answers 200 at once, and the ledger has one claim and one charge."""
    server = await start_server()
    operator, agent = await mint(
        server.env["WL_DATABASE_URL"], [(Role.OPERATOR, "op"), (Role.AGENT, "a")]
    )
    async with client(server.url, operator, timeout=30) as op:
        units = {"units": [{"external_ref": "u", "fleet": "f"}]}
        assert (await op.post("/units", json=units)).status_code == 200
    async with client(server.url, agent, timeout=30) as http:
        claim = http.post("/units/claim", json={}, headers={"Idempotency-Key": "claim-1"})
        await _killed_mid_write(server, raw, "work_unit_attempts", claim)
    await server.start()
    async with client(server.url, agent, timeout=30) as http:
        claimed = await _retried(http, "/units/claim", {}, "claim-1")
        assert claimed.status_code == 200
        attempt = claimed.json()["attempt"]["id"]
        cost = http.post(
            f"/attempts/{attempt}/cost", json={"cost_cents": 500}, headers={"Idempotency-Key": "c"}
        )
        await _killed_mid_write(server, raw, "work_unit_events", cost)
    await server.start()
    async with client(server.url, agent, timeout=30) as http:
        charged = await _retried(http, f"/attempts/{attempt}/cost", {"cost_cents": 500}, "c")
        assert charged.status_code == 200
    claims = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events WHERE event_type = 'claimed'"
    )
    assert (claims, await raw.fetchval("SELECT cost_cents FROM work_units")) == (1, 500)
    code, out = await audit(server.env)
    assert code == 0, out
