"""The TypeScript client's live scenarios (clients/typescript/test/live) against two real
`serve` replicas on one database, with tokens minted by `work-ledger token create`."""

# ruff: noqa: F811  (a test taking the shared `start_replicas` fixture names it as a parameter)

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import asyncpg
import pytest

from support.ports import free_port
from support.replicas import StartReplicas, start_replicas  # noqa: F401  (the shared fixture)
from support.served import cli_token, ledger_env
from work_ledger.service.tokens import Role

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
# 10x a loaded machine's run (about 60 s with other suites on the same two cores).
VITEST_TIMEOUT = 500.0


def _vitest() -> Path:
    vitest = PACKAGE / "node_modules" / ".bin" / "vitest"
    if shutil.which("node") is None or not vitest.exists():
        pytest.skip(
            "the TypeScript client's packages are not installed: run `npm ci` in "
            "clients/typescript (Node >= 20.19), as .ci/run does"
        )
    return vitest


@pytest.mark.timeout(VITEST_TIMEOUT + 100)
async def test_typescript_client_live_scenarios(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection, tmp_path: Path
) -> None:
    """A unit's life, a cap and a bulk release, 16 racing claimers, a woken long-poll, triage,
    failover: all seven pass."""
    vitest = _vitest()
    a, b = await start_replicas(2)
    home = tmp_path / "cli"
    home.mkdir()
    env = ledger_env(database_url, home)
    tokens = [
        await cli_token(env, role, principal)
        for role, principal in (
            (Role.OPERATOR, "ts-op"),
            (Role.AGENT, "ts-agent"),
            (Role.TRIAGE, "ts-triage"),
        )
    ]
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    run_env |= {
        "WL_LIVE_URLS": f"{a.url},{b.url}",
        "WL_LIVE_OPERATOR": tokens[0],
        "WL_LIVE_AGENT": tokens[1],
        "WL_LIVE_AGENT_PRINCIPAL": "ts-agent",
        "WL_LIVE_TRIAGE": tokens[2],
        "WL_LIVE_DEAD_URL": f"http://127.0.0.1:{free_port()}",
        "WL_LIVE_RUN": "live",
        "NO_COLOR": "1",
    }
    proc = await asyncio.create_subprocess_exec(
        str(vitest),
        "run",
        "test/live",
        cwd=PACKAGE,
        env=run_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), VITEST_TIMEOUT)
    report = out.decode(errors="replace")
    print(report)
    assert proc.returncode == 0, report
    assert "7 passed" in report, report
    # The database's own view of the race: each unit claimed by one attempt, and done.
    race = await raw.fetch(
        "SELECT attempt_count, state::text FROM work_units WHERE domain = 'race-live'"
    )
    assert [(r["attempt_count"], r["state"]) for r in race] == [(1, "done")] * 48
