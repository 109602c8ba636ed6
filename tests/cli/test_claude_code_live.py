"""Opt-in: `run` wrapping the real `claude -p ... --output-format json`, end to end, against
the fake Messages API of scripts/fake_anthropic.py (no network to Anthropic is needed).

Runs only with WL_TEST_CLAUDE set to a Claude Code binary, e.g.
`npm install -g --prefix /tmp/claude-code @anthropic-ai/claude-code` and
`WL_TEST_CLAUDE=/tmp/claude-code/bin/claude uv run pytest tests/cli/test_claude_code_live.py`.
"""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_run import operator, run, run_server  # noqa: F401  (shared fixtures)

from support.ports import free_port
from support.wl_server import LedgerServer
from work_ledger.client import Client

CLAUDE = os.environ.get("WL_TEST_CLAUDE")
FAKE = Path(__file__).parents[2] / "scripts" / "fake_anthropic.py"

pytestmark = pytest.mark.skipif(not CLAUDE, reason="set WL_TEST_CLAUDE to a claude binary")


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[str]:
    """The fake Messages API, delegating once to a haiku subagent: its base URL."""
    port = free_port()
    log = tmp_path / "requests.log"
    command = [sys.executable, str(FAKE), "--port", str(port), "--log", str(log), "--subagent"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        assert int(server.stdout.readline()) == port
        yield f"http://127.0.0.1:{port}"
        server.terminate()


def test_run_records_what_the_real_claude_code_reported(
    run_server: LedgerServer,
    operator: Client,
    fake_api: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run -- sh -c 'claude -p "say hi" --output-format json > "$WL_RESULT_FILE"'`: the
    unit's attempt has one estimated entry per model Claude Code used, with its tokens."""
    assert CLAUDE is not None
    home = tmp_path / "claude-home"
    home.mkdir()
    for name, value in {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": fake_api,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }.items():
        monkeypatch.setenv(name, value)
    operator.register([{"external_ref": "orders/7", "fleet": "f"}])
    claude = shlex.quote(CLAUDE)
    script = f'{claude} -p "say hi" --output-format json > "$WL_RESULT_FILE"'
    status, err = run(run_server, tmp_path, "--", "sh", "-c", script)
    assert status == 0, err
    (attempt,) = operator.get_unit("orders/7").attempts
    # The main model is Claude Code's default (claude-opus-4-8[1m] in 2.1.197), the
    # subagent's the haiku the fake was asked for.
    (haiku,) = [m for m in attempt.cost_by_model if "haiku" in (m.model or "")]
    (main,) = [m for m in attempt.cost_by_model if m is not haiku]
    assert (haiku.input_tokens, haiku.output_tokens, haiku.estimated_cents) == (412, 9, 1)
    assert (main.input_tokens, main.output_tokens) == (8, 24)
    assert (main.cache_read_tokens, main.cache_write_tokens) == (24576, 10240)
    assert attempt.cost_cents == haiku.cost_cents + main.cost_cents
    assert main.estimated_cents == main.cost_cents > 0
