"""The history checker over a randomized workload of concurrent HTTP agents."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from support.history import check
from support.served import StartServer, audit, cli_token, client, mint
from support.workload import Op, Recorder, Workload
from work_ledger.service.tokens import Role

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
    workload.doomed = {names[0], names[1]}  # at least two deaths, early: reclaims are certain
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(SECONDS)
    # Then on until the history holds what the checks below need: on a busy machine six
    # seconds may not see a dead agent's lease lapse and its unit reclaimed.
    async with asyncio.timeout(180):
        while not await _rich_enough(raw, workload.recorder):  # noqa: ASYNC110  (a database fact)
            await asyncio.sleep(0.2)
    workload.stop.set()
    recorder = await load
    report = await check(raw, recorder)
    code, out = await audit(server.env)
    print(f"\n{report.summary()}\nagent deaths: {workload.deaths}\naudit: {out.strip()}")

    assert report.violations == []
    assert code == 0, out
    assert report.acked > 100
    assert report.reclaims > 0  # dead agents' units came back
    assert report.duplicates_replayed > 0
    assert report.refused > 0


async def _rich_enough(raw: asyncpg.Connection, recorder: Recorder) -> bool:
    """A reclaim in the ledger, and over 100 acknowledged writes, a same-key replay and a
    refusal in the history."""
    writes = [op for op in recorder.ops if op.method == "POST"]
    reclaims = await raw.fetchval(
        "SELECT count(*) FROM work_unit_events WHERE event_type = 'stale_reclaimed'"
    )
    return (
        reclaims > 0
        and sum(op.acked for op in writes) > 100
        and any(op.replayed for op in writes)
        and any(op.status is not None and 400 <= op.status < 500 for op in writes)
    )


async def test_history_checker_catches_an_acknowledged_write_the_ledger_lacks(
    raw: asyncpg.Connection,
) -> None:
    """The checker is not vacuous: a 2xx cost with no cost_recorded event is a violation."""
    attempt = str(uuid.uuid4())
    acked = Op(
        0, "agent-x", "cost", "POST", f"/attempts/{attempt}/cost", {"cost_cents": 417},
        "k1", 0, 0.0, 0.01, 200, {"attempt": {"id": attempt}}, False, None,
    )  # fmt: skip
    recorder = Recorder()
    recorder.ops.append(acked)
    report = await check(raw, recorder)
    assert any("acknowledged but not in the ledger" in v for v in report.violations)
    assert any("ledger cost 0 is not between" in v for v in report.violations)
