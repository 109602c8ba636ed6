"""Opt-in: a real `claude -p` session through the plugin (integrations/claude-code) claims,
works and disposes a unit against a real ledger, through the MCP tools the plugin brings
(the fake Messages API of scripts/fake_anthropic.py --ledger plays the model: it calls
claim, verify and dispose, one per turn). Runs only with WL_TEST_CLAUDE set."""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_run import operator, run_server  # noqa: F401  (shared fixtures)

from support.ports import free_port
from support.wl_server import LedgerServer
from work_ledger.client import Client

CLAUDE = os.environ.get("WL_TEST_CLAUDE")
ROOT = Path(__file__).parents[2]
FAKE = ROOT / "scripts" / "fake_anthropic.py"
PLUGIN = ROOT / "integrations" / "claude-code"

pytestmark = pytest.mark.skipif(not CLAUDE, reason="set WL_TEST_CLAUDE to a claude binary")


def test_a_session_through_the_plugin_claims_works_and_disposes_a_unit(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    assert CLAUDE is not None
    operator.register([{"external_ref": "orders/77", "fleet": "f"}])
    port, log = free_port(), tmp_path / "requests.log"
    fake = [sys.executable, str(FAKE), "--port", str(port), "--log", str(log), "--ledger"]
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "WL_URL": run_server.url,
        "WL_TOKEN": run_server.token("agent", "plugin-agent"),
        # The hooks run `work-ledger`: this environment's.
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    for name in ("WL_UNIT_ID", "WL_ATTEMPT_ID", "WL_RESULT_FILE", "WL_HOME"):
        env.pop(name, None)
    with subprocess.Popen(fake, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            assert int(server.stdout.readline()) == port
            done = subprocess.run(
                [
                    CLAUDE,
                    "-p",
                    "Claim a unit from the work ledger and finish it",
                    "--plugin-dir",
                    str(PLUGIN),
                    "--output-format",
                    "json",
                    "--allowedTools",
                    "mcp__plugin_work-ledger_work-ledger",
                ],
                env=env,
                cwd=work,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        finally:
            server.terminate()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    offered = sorted({t for c in calls for t in c.get("tools", []) if "work-ledger" in t})
    assert done.returncode == 0, (done.stdout, done.stderr, offered)
    detail = operator.get_unit("orders/77")
    assert (detail.unit.state, detail.unit.disposition) == ("done", "MIGRATED"), offered
    (attempt,) = detail.attempts
    assert (attempt.agent_id, attempt.outcome) == ("plugin-agent", "verified")
    assert attempt.evidence_url == "https://ci.example/runs/1"
    # The SessionStart hook's context reached the model (no unit held yet at the start).
    assert any(c.get("briefed") for c in calls if "haiku" not in (c["model"] or ""))
