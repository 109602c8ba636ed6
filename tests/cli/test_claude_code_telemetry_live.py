"""Opt-in: the real Claude Code's telemetry reaching the ledger live (DESIGN §13), through
`work-ledger run`, against the fake Messages API (scripts/fake_anthropic.py --subagent
--slow: two API calls spend money, then the last answer waits).

Runs only with WL_TEST_CLAUDE set to a Claude Code binary (.ci/run installs the pinned one):
`npm install -g --prefix /tmp/claude-code @anthropic-ai/claude-code@2.1.197`, then
`WL_TEST_CLAUDE=/tmp/claude-code/bin/claude uv run pytest tests/cli -k live`.
"""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_run import launch, operator, run_server  # noqa: F401  (shared fixtures)

from support.ports import free_port
from support.wl_server import LedgerServer
from work_ledger.client import Client

CLAUDE = os.environ.get("WL_TEST_CLAUDE")
FAKE = Path(__file__).parents[2] / "scripts" / "fake_anthropic.py"
OPUS, HAIKU = "claude-opus-4-8", "claude-haiku-4-5-20251001"

pytestmark = pytest.mark.skipif(not CLAUDE, reason="set WL_TEST_CLAUDE to a claude binary")


def slow_fake(tmp_path: Path, slow: float) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = tmp_path / "requests.log"
    command = [sys.executable, str(FAKE), "--port", str(port), "--log", str(log)]
    command += ["--subagent", "--slow", str(slow)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        assert int(server.stdout.readline()) == port
        yield f"http://127.0.0.1:{port}", log
        server.terminate()


@pytest.fixture
def claude_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Claude Code's own settings: a fresh HOME, the fake's key, no updater."""
    home = tmp_path / "claude-home"
    home.mkdir()
    for name, value in {
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OTEL_LOGS_EXPORT_INTERVAL", raising=False)
    return home


def _spend(operator: Client, ref: str) -> dict[str | None, int]:
    attempts = operator.get_unit(ref).attempts  # none until `run` has claimed
    return {m.model: m.cost_cents for a in attempts for m in a.cost_by_model}


def _wait_for(operator: Client, ref: str, want: dict[str | None, int], limit: float) -> float:
    """Seconds until the attempt's spend is `want` (fails after `limit`)."""
    started = time.monotonic()
    while _spend(operator, ref) != want:
        assert time.monotonic() - started < limit, _spend(operator, ref)
        time.sleep(0.1)
    return time.time()


def test_cost_arrives_live_and_the_result_never_double_counts(
    run_server: LedgerServer,
    operator: Client,
    tmp_path: Path,
    claude_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run -- claude -p ...` with run's exporter settings (interval 5 s): the two calls'
    spend (opus 4 cents, haiku 1) is on the attempt while the session still waits on its
    last answer; at the end the result adds nothing telemetry did not: 9 cents, not 18."""
    assert CLAUDE is not None
    fake = slow_fake(tmp_path, 20)
    url, log = next(fake)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    operator.register([{"external_ref": "live/1", "fleet": "f"}])
    script = f'{CLAUDE} -p "say hi" --output-format json > "$WL_RESULT_FILE"'
    child = launch(run_server, tmp_path, "--", "sh", "-c", script)
    try:
        seen = _wait_for(operator, "live/1", {OPUS: 4, HAIKU: 1}, 60)
        assert child.poll() is None  # the session is still running
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        spent = max(c["at"] for c in calls if "haiku" in (c["model"] or ""))
        print(f"telemetry cost on the ledger {seen - spent:.1f} s after the API call")
        assert seen - spent < 100  # the goal is 10 s (5 s interval + a request); 10x here
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        next(fake, None)
    assert child.returncode == 0, err
    assert _spend(operator, "live/1") == {OPUS: 8, HAIKU: 1}
    (attempt,) = operator.get_unit("live/1").attempts
    assert attempt.cost_cents == 9
    events = [e for e in operator.iter_events("live/1") if e.event_type == "cost_recorded"]
    assert sum(e.cost_delta_cents or 0 for e in events) == 9


def test_a_sigkilled_session_leaves_its_spend_on_the_attempt(
    run_server: LedgerServer,
    operator: Client,
    tmp_path: Path,
    claude_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claude Code SIGKILLed mid-session writes no result; what its API calls cost is on
    the attempt all the same, and the attempt is released failed."""
    assert CLAUDE is not None
    fake = slow_fake(tmp_path, 120)
    url, _ = next(fake)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("OTEL_LOGS_EXPORT_INTERVAL", "1000")
    operator.register([{"external_ref": "killed/1", "fleet": "f"}])
    child = launch(run_server, tmp_path, "--", CLAUDE, "-p", "say hi")
    try:
        _wait_for(operator, "killed/1", {OPUS: 4, HAIKU: 1}, 60)
        (claude,) = psutil.Process(child.pid).children()
        claude.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        next(fake, None)
    assert child.returncode == 128 + signal.SIGKILL, err
    (attempt,) = operator.get_unit("killed/1").attempts
    assert (attempt.outcome, attempt.cost_cents) == ("failed", 5)


def test_three_agents_with_a_kill_count_no_cent_twice(
    run_server: LedgerServer,
    operator: Client,
    tmp_path: Path,
    claude_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three `run -- claude -p` agents at once, one SIGKILLed mid-session: each finished
    attempt costs what its session spent (9 cents), the killed one what it spent before
    the kill (5); the ledger's total is exactly their sum: 0 cents double-counted."""
    assert CLAUDE is not None
    fake = slow_fake(tmp_path, 30)  # the kill lands while fleet/2 still waits
    url, _ = next(fake)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("OTEL_LOGS_EXPORT_INTERVAL", "1000")
    refs = ["fleet/1", "fleet/2", "fleet/3"]
    operator.register([{"external_ref": ref, "fleet": "f"} for ref in refs])
    script = f'{CLAUDE} -p "say hi" --output-format json > "$WL_RESULT_FILE"'
    agents = {}
    for n, ref in enumerate(refs, 1):
        # Three agents (sub-agents of one token: one holder each), each on its own unit.
        monkeypatch.setenv("WL_AGENT", f"runner/{n}")
        agents[ref] = launch(run_server, tmp_path, "--unit", ref, "--", "sh", "-c", script)
    try:
        _wait_for(operator, "fleet/2", {OPUS: 4, HAIKU: 1}, 60)
        descendants = psutil.Process(agents["fleet/2"].pid).children(recursive=True)
        (claude,) = [p for p in descendants if p.name() not in ("sh", "dash", "bash")]
        claude.send_signal(signal.SIGKILL)
        errors = {ref: child.communicate(timeout=120)[1] for ref, child in agents.items()}
    finally:
        for child in agents.values():
            if child.poll() is None:
                child.kill()
        next(fake, None)
    statuses = {ref: child.returncode for ref, child in agents.items()}
    assert statuses == {"fleet/1": 0, "fleet/2": 128 + signal.SIGKILL, "fleet/3": 0}, errors
    spent = {ref: operator.get_unit(ref).unit.cost_cents for ref in refs}
    assert spent == {"fleet/1": 9, "fleet/2": 5, "fleet/3": 9}
    recorded = sum(
        e.cost_delta_cents or 0
        for ref in refs
        for e in operator.iter_events(ref)
        if e.event_type == "cost_recorded"
    )
    print(f"3 agents, one killed: {recorded} cents recorded, {recorded - 23} double-counted")
    assert recorded == 23
