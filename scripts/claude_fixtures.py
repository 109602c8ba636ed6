"""Regenerate tests/cli/fixtures/claude_code/: what the real Claude Code writes to stdout for
`claude -p "say hi" --output-format json` (and stream-json), against the fake Messages API
of scripts/fake_anthropic.py, since there is no network to Anthropic here.

    npm install -g --prefix /tmp/claude-code @anthropic-ai/claude-code
    CLAUDE=/tmp/claude-code/bin/claude python scripts/claude_fixtures.py [OUT_DIR]

Each run gets a fresh HOME (Claude Code writes its settings there) and an empty working
directory; stdout is written byte for byte. The files (default OUT_DIR
tests/cli/fixtures/claude_code/):

| file | how | what it shows |
|---|---|---|
| result.json | `claude -p "say hi" --output-format json` | one model, four token classes |
| subagent.json | the same, the fake first calling the Agent tool with haiku | two models |
| max_turns.json | the same with `--max-turns 1` (exit status 1) | is_error true, money spent |
| api_error.json | the fake answering 400 (exit status 1) | is_error true, nothing spent |
| stream.jsonl | subagent, `--output-format stream-json --verbose` | JSON lines, the result last |
| VERSION | `claude --version` | which Claude Code wrote them |

Session ids, uuids and durations differ from run to run; models, tokens and costUSD do
not (the fake's usage is fixed; Claude Code prices it with its own list prices). Not
product code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "scripts" / "fake_anthropic.py"
PROMPT = "say hi"

# name, fake's options, claude's options, expected exit status
RUNS = [
    ("result.json", [], ["--output-format", "json"], 0),
    ("subagent.json", ["--subagent"], ["--output-format", "json"], 0),
    ("max_turns.json", ["--subagent"], ["--output-format", "json", "--max-turns", "1"], 1),
    ("api_error.json", ["--refuse", "400"], ["--output-format", "json"], 1),
    ("stream.jsonl", ["--subagent"], ["--output-format", "stream-json", "--verbose"], 0),
]


@contextmanager
def fake_api(options: list[str], log: Path) -> Iterator[str]:
    """The fake Messages API on a free port: its base URL."""
    command = [sys.executable, str(FAKE), "--log", str(log), *options]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()


def claude_env(base_url: str, home: Path, claude: str) -> dict[str, str]:
    """A bare environment: the fake API, a dummy key, no telemetry, no updater."""
    return {
        "PATH": f"{Path(claude).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-fixtures",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def capture(claude: str, name: str, fake: list[str], args: list[str], want: int, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="claude-fixture-") as scratch:
        home, work = Path(scratch) / "home", Path(scratch) / "work"
        home.mkdir()
        work.mkdir()
        with fake_api(fake, Path(scratch) / "requests.log") as url:
            done = subprocess.run(
                [claude, "-p", PROMPT, *args],
                env=claude_env(url, home, claude),
                cwd=work,
                capture_output=True,
                timeout=120,
                check=False,
            )
        requests = (Path(scratch) / "requests.log").read_text().count("\n")
    if done.returncode != want:
        sys.exit(f"{name}: claude exited {done.returncode}, not {want}: {done.stderr.decode()}")
    (out / name).write_bytes(done.stdout)
    print(f"{name}: exit {done.returncode}, {requests} API calls, {len(done.stdout)} bytes")


def main() -> None:
    claude = os.environ.get("CLAUDE") or shutil.which("claude")
    if not claude:
        sys.exit("no claude: install @anthropic-ai/claude-code and set CLAUDE to its binary")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/cli/fixtures/claude_code"
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([claude, "--version"], capture_output=True, text=True, check=True)
    (out / "VERSION").write_text(version.stdout)
    print(f"Claude Code {version.stdout.strip()}")
    for name, fake, args, want in RUNS:
        capture(claude, name, fake, args, want, out)


if __name__ == "__main__":
    main()
