"""The history checker over a randomized workload of concurrent HTTP agents."""

from __future__ import annotations

import asyncpg
import pytest
from history import check
from served import StartServer, audit, cli_token, client, mint
from workload import Workload

from work_ledger.auth import Role

pytestmark = pytest.mark.faults
AGENTS = 12
UNITS = 400
SECONDS = 6.0


async def test_history_random_workload_keeps_every_promise(
    start_server: StartServer, raw: asyncpg.Connection
) -> None:
    """Claims, blocks, costs, retries, timeouts and deaths: the ledger agrees with the history."""
    server = await start_server()
    names = [f"agent-{i:02d}" for i in range(AGENTS)]
    operator, triage, *tokens = await mint(
        server.env["WL_DATABASE_URL"],
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names[1:]],
    )
    tokens.insert(0, await cli_token(server.env, Role.AGENT, names[0]))
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"hist-{i}", "fleet": "f", "domain": "d"} for i in range(UNITS)]
        assert (await op.post("/units", json={"units": units})).status_code == 200

    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage)
    recorder = await workload.run(SECONDS)
    report = await check(raw, recorder)
    code, out = await audit(server.env)
    print(f"\n{report.summary()}\nagent deaths: {workload.deaths}\naudit: {out.strip()}")

    assert report.violations == []
    assert code == 0, out
    assert report.acked > 100
    assert report.reclaims > 0  # dead agents' units came back
    assert report.duplicates_replayed > 0
    assert report.refused > 0
