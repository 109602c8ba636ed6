"""The plugin (integrations/claude-code) and its marketplace pass `claude plugin validate
--strict`. Opt-in: WL_TEST_CLAUDE names a Claude Code binary (.ci/run installs one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CLAUDE = os.environ.get("WL_TEST_CLAUDE")
INTEGRATIONS = Path(__file__).parents[2] / "integrations"

pytestmark = pytest.mark.skipif(not CLAUDE, reason="set WL_TEST_CLAUDE to a claude binary")


@pytest.mark.parametrize("folder", ["claude-code", "."])
def test_claude_validates_the_plugin_and_its_marketplace(folder: str, tmp_path: Path) -> None:
    assert CLAUDE is not None
    done = subprocess.run(
        [CLAUDE, "plugin", "validate", "--strict", str(INTEGRATIONS / folder)],
        env={**os.environ, "HOME": str(tmp_path), "DISABLE_AUTOUPDATER": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation passed" in done.stdout


def test_claude_installs_the_plugin_from_the_local_marketplace(tmp_path: Path) -> None:
    """`claude plugin marketplace add ./integrations`, then `claude plugin install
    work-ledger@work-ledger`: listed, enabled."""
    assert CLAUDE is not None
    env = {**os.environ, "HOME": str(tmp_path), "DISABLE_AUTOUPDATER": "1"}

    def claude(*args: str) -> str:
        done = subprocess.run(
            [CLAUDE, "plugin", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    claude("marketplace", "add", str(INTEGRATIONS))
    claude("install", "work-ledger@work-ledger")
    listed = claude("list")
    assert "work-ledger@work-ledger" in listed
    assert "enabled" in listed
