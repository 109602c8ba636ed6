"""`work-ledger audit` as an operator runs it: a subprocess against the test database."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg

from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
WORK_LEDGER = str(Path(sys.executable).parent / "work-ledger")


async def _audit_cli(database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WL_DATABASE_URL": database_url}
    return await asyncio.to_thread(
        subprocess.run,
        [WORK_LEDGER, "audit"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _some_history(ledger: Ledger) -> None:
    await ledger.register(
        [NewUnit(ref, "fleet-a", "orders") for ref in ("u-cost", "u-attempts", "u-state")],
        OPERATOR,
    )
    for agent in ("agent-1", "agent-2"):
        claim = await ledger.claim(agent)
        assert claim.attempt is not None
        await ledger.record_cost(claim.attempt.id, 120, Actor(agent))


async def test_audit_cli_is_clean_on_a_sound_ledger(
    ledger: Ledger, database_url: str, tmp_path: Path
) -> None:
    """On a ledger written only through the service, audit exits 0 and says clean."""
    await _some_history(ledger)
    result = await _audit_cli(database_url, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "audit clean" in result.stdout


async def test_audit_cli_lists_each_violation_and_exits_1(
    ledger: Ledger, raw: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    """Corrupted behind the triggers' back, the ledger fails audit naming every broken rule."""
    await _some_history(ledger)
    await raw.execute("SET session_replication_role = replica")  # triggers off (superuser)
    await raw.execute("UPDATE work_units SET cost_cents = 999 WHERE external_ref = 'u-cost'")
    await raw.execute(
        "UPDATE work_units SET state = 'abandoned', disposition = 'DROPPED', disposed_at = now()"
        " WHERE external_ref = 'u-state'"
    )
    await raw.execute(
        "INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, outcome, ended_at)"
        " SELECT id, 3, 'ghost', 'failed', now() FROM work_units"
        " WHERE external_ref = 'u-attempts'"
    )
    await raw.execute("RESET session_replication_role")

    result = await _audit_cli(database_url, tmp_path)

    assert result.returncode == 1, (result.stdout, result.stderr)
    for unit, rule in [
        ("u-cost", "unit_cost_equals_attempt_costs"),
        ("u-state", "state_reproducible_from_events"),
        ("u-attempts", "attempt_numbers_contiguous"),
    ]:
        assert any(unit in line and rule in line for line in result.stdout.splitlines()), (
            unit,
            rule,
            result.stdout,
        )
    assert "audit clean" not in result.stdout
