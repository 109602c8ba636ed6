"""`work-ledger hook EVENT`, the Claude Code plugin's hooks (integrations/claude-code), fed
the event JSON Claude Code sends on stdin, against a real ledger."""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_run import CLI, operator, run_server  # noqa: F401  (shared fixtures)

from support.wl_server import LedgerServer
from work_ledger.client import Client

PLUGIN = Path(__file__).parents[2] / "integrations" / "claude-code"


@pytest.fixture
def agent(run_server: LedgerServer, operator: Client) -> Iterator[Client]:
    operator.register([{"external_ref": "orders/9", "fleet": "f", "domain": "orders"}])
    with Client(run_server.url, run_server.token("agent", "agent-9")) as client:
        yield client


def hook(
    server: LedgerServer,
    agent: Client,
    tmp_path: Path,
    event: str,
    data: dict[str, Any],
    **env: str,
) -> tuple[str, str]:
    """Run the hook as Claude Code does: (stdout, stderr); it always exits 0."""
    environment = {
        **os.environ,
        "WL_URL": server.url,
        "WL_TOKEN": server.token("agent", "agent-9"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        **env,
    }
    for name in ("WL_UNIT_ID", "WL_ATTEMPT_ID", "WL_RESULT_FILE"):
        if name not in env:
            environment.pop(name, None)
    done = subprocess.run(
        [*CLI, "hook", event],
        input=json.dumps({"session_id": "s-1", **data}),
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def _claim_answer(agent: Client) -> dict[str, Any]:
    """What Claude Code hands PostToolUse for the MCP claim tool (its text answer)."""
    got = agent.claim_next()
    assert got.unit is not None
    assert got.attempt is not None
    text = f"Claimed unit {got.unit.external_ref}: id {got.unit.id}, attempt 1, state claimed."
    return {
        "hook_event_name": "PostToolUse",
        "tool_name": "mcp__plugin_work-ledger_work-ledger__claim",
        "tool_input": {},
        "tool_response": [{"type": "text", "text": text}],
    }


def test_session_start_briefs_the_held_unit_or_says_how_to_get_one(
    run_server: LedgerServer, operator: Client, agent: Client, tmp_path: Path
) -> None:
    out, _ = hook(run_server, agent, tmp_path, "session-start", {"source": "startup"})
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "You hold no work-ledger unit" in context
    hook(run_server, agent, tmp_path, "post-tool-use", _claim_answer(agent))
    out, _ = hook(run_server, agent, tmp_path, "session-start", {"source": "resume"})
    output = json.loads(out)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    assert "You hold work-ledger unit orders/9" in output["additionalContext"]
    assert "domain orders" in output["additionalContext"]


def test_session_start_under_run_briefs_runs_unit(
    run_server: LedgerServer, operator: Client, agent: Client, tmp_path: Path
) -> None:
    got = agent.claim_next()
    assert got.unit is not None
    assert got.attempt is not None
    env = {"WL_UNIT_ID": got.unit.id, "WL_ATTEMPT_ID": got.attempt.id}
    out, _ = hook(run_server, agent, tmp_path, "session-start", {}, **env)
    assert "orders/9" in json.loads(out)["hookSpecificOutput"]["additionalContext"]


def test_post_tool_use_heartbeats_at_most_once_per_30_s(
    run_server: LedgerServer, operator: Client, agent: Client, tmp_path: Path
) -> None:
    """The claim is noted (that counts as a beat); the next tool call within 30 s sends
    none; once the note is 30 s old, one is sent."""
    hook(run_server, agent, tmp_path, "post-tool-use", _claim_answer(agent))
    before = operator.get_unit("orders/9").unit.lease_expires_at
    hook(run_server, agent, tmp_path, "post-tool-use", {"tool_name": "Bash"})
    assert operator.get_unit("orders/9").unit.lease_expires_at == before
    (state,) = (tmp_path / "state" / "work-ledger" / "claude-sessions").iterdir()
    noted = json.loads(state.read_text())
    state.write_text(json.dumps({**noted, "beat": noted["beat"] - 31}))
    hook(run_server, agent, tmp_path, "post-tool-use", {"tool_name": "Bash"})
    after = operator.get_unit("orders/9").unit.lease_expires_at
    assert before is not None
    assert after is not None
    assert after > before


def test_stop_failure_releases_with_the_api_error(
    run_server: LedgerServer, operator: Client, agent: Client, tmp_path: Path
) -> None:
    hook(run_server, agent, tmp_path, "post-tool-use", _claim_answer(agent))
    failure = {"error": "rate_limit", "error_details": "429 Too Many Requests"}
    hook(run_server, agent, tmp_path, "stop-failure", failure)
    detail = operator.get_unit("orders/9")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")
    (released,) = [e for e in operator.iter_events("orders/9") if e.event_type == "released"]
    assert released.detail["reason"] == (
        "Claude Code stopped on an API error: rate_limit (429 Too Many Requests)"
    )
    _, err = hook(run_server, agent, tmp_path, "session-end", {"reason": "other"})
    assert err == ""  # nothing held any more: nothing to do


def test_session_end_releases_a_unit_still_held_but_not_under_run(
    run_server: LedgerServer, operator: Client, agent: Client, tmp_path: Path
) -> None:
    hook(run_server, agent, tmp_path, "post-tool-use", _claim_answer(agent))
    hook(run_server, agent, tmp_path, "session-end", {"reason": "other"}, WL_RESULT_FILE="x")
    assert operator.get_unit("orders/9").unit.state == "claimed"  # `run` settles it
    hook(run_server, agent, tmp_path, "session-end", {"reason": "prompt_input_exit"})
    detail = operator.get_unit("orders/9")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "abandoned")


def test_a_hook_that_cannot_reach_the_ledger_still_exits_0(
    run_server: LedgerServer, agent: Client, tmp_path: Path
) -> None:
    """Best effort: the failure is said on stderr, and Claude Code goes on."""
    env = {"WL_URL": "http://127.0.0.1:9", "WL_UNIT_ID": "0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b"}
    out, err = hook(run_server, agent, tmp_path, "session-start", {}, **env)
    assert (out, err.split(":")[0]) == ("", "work-ledger hook session-start")


def test_the_plugin_names_these_hooks() -> None:
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    commands = {
        event: [h["command"] for group in groups for h in group["hooks"]]
        for event, groups in hooks.items()
    }
    assert commands == {
        "SessionStart": ["work-ledger hook session-start"],
        "PostToolUse": ["work-ledger hook post-tool-use"],
        "StopFailure": ["work-ledger hook stop-failure"],
        "SessionEnd": ["work-ledger hook session-end"],
    }
    mcp = json.loads((PLUGIN / ".mcp.json").read_text())["mcpServers"]["work-ledger"]
    assert mcp == {
        "type": "http",
        "url": "${WL_URL}/mcp",
        "headers": {"Authorization": "Bearer ${WL_TOKEN}"},
    }
