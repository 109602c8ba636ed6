"""The sync SDK is what `scripts/unasync.py` generates from the async one, byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "unasync.py"
CLIENT = Path("src/work_ledger/client")


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_checked_in_sync_client_is_the_generated_one() -> None:
    """`unasync.py --check` over this checkout: nothing to regenerate."""
    done = check(ROOT)
    assert (done.returncode, done.stdout) == (0, "")


def test_a_hand_edit_of_a_generated_file_is_caught(tmp_path: Path) -> None:
    """A copy whose sync.py was edited by hand fails the check, naming the file and the fix."""
    shutil.copytree(ROOT / CLIENT, tmp_path / CLIENT)
    edited = tmp_path / CLIENT / "sync.py"
    edited.write_text(edited.read_text().replace("def claim_work(", "def take_work("))
    done = check(tmp_path)
    assert done.returncode == 1
    assert "-    def take_work(" in done.stdout
    assert "src/work_ledger/client/sync.py differ" in done.stderr
    assert "uv run python scripts/unasync.py" in done.stderr


def test_a_source_change_not_regenerated_is_caught(tmp_path: Path) -> None:
    """A copy whose async source gained a method, without regenerating, fails the check."""
    shutil.copytree(ROOT / CLIENT, tmp_path / CLIENT)
    source = tmp_path / CLIENT / "aio_work.py"
    source.write_text(source.read_text() + "\n\nasync def added() -> None:\n    await added()\n")
    done = check(tmp_path)
    assert done.returncode == 1
    assert "+def added() -> None:\n+    added()" in done.stdout
    assert "src/work_ledger/client/work.py differ" in done.stderr
