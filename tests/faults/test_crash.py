"""kill -9 of the API server in the middle of concurrent claims, transitions and costs."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import asyncpg
import httpx
import pytest
from history import check
from served import SECRET, StartServer, audit, cli_token, client, mint
from workload import Chaos, Workload

from work_ledger.api.app import create_app
from work_ledger.auth import Role
from work_ledger.config import Settings

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
        f"idempotency keys left reserved by the killed server: {len(orphans)}\naudit: {out}"
    )
    assert report.violations == []
    assert code == 0, out
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


async def test_idempotency_takeover_after_a_crash_does_not_run_the_write_twice(
    database_url: str, raw: asyncpg.Connection, tmp_path: Path
) -> None:
    """A cost whose server died before storing its outcome is not charged again on retry."""
    settings = Settings(database_url, tmp_path, 60, 300, (), "", None, SECRET)
    app = create_app(settings, max_connections=4)
    [operator, agent] = await mint(database_url, [(Role.OPERATOR, "op"), (Role.AGENT, "a")])
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://wl") as http,
    ):
        op, me = {"Authorization": f"Bearer {operator}"}, {"Authorization": f"Bearer {agent}"}
        units = {"units": [{"external_ref": "u", "fleet": "f"}]}
        assert (await http.post("/units", json=units, headers=op)).status_code == 200
        attempt = (await http.post("/units/claim", json={}, headers=me)).json()["attempt"]["id"]
        key = me | {"Idempotency-Key": "cost-1"}
        first = await http.post(f"/attempts/{attempt}/cost", json={"cost_cents": 500}, headers=key)
        assert first.status_code == 200
        # The state kill -9 leaves between the write's commit and the outcome's, aged past
        # TAKEOVER_SECONDS: reserved, no outcome stored.
        await raw.execute(
            "UPDATE wl_idempotency_keys SET status_code = NULL, content_type = NULL, body = NULL, "
            "completed_at = NULL,"
            " created_at = now() - interval '1 hour' WHERE key = 'cost-1'"
        )
        retry = await http.post(f"/attempts/{attempt}/cost", json={"cost_cents": 500}, headers=key)
    charged = await raw.fetchval("SELECT cost_cents FROM work_units WHERE external_ref = 'u'")
    assert (retry.status_code, charged) != (200, 1000)
    assert charged == 500
