"""`work-ledger restore --wal/--to` refuses what it cannot do, naming the next step, and
changes nothing; `backup --base` never overwrites."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WORK_LEDGER = str(Path(sys.executable).parent / "work-ledger")


def _cli(home: Path, *args: str, **env: str) -> tuple[int, str]:
    """Exit code, and stderr with its line wrapping undone."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    done = subprocess.run(
        [WORK_LEDGER, *args],
        env={**clean, "WL_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, " ".join(done.stderr.split())


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A folder that looks like a base backup (its label), for the refusals before any copy."""
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "backup_label").write_text("START WAL LOCATION: 0/2000028\n")
    return folder


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--wal", "WAL", "--to", "yesterday"], "is not an ISO 8601 time with its offset"),
        (["--to", "2026-12-01T20:15:00+00:00"], "--to needs --wal"),
    ],
)
def test_restore_refuses_a_moment_it_cannot_use(
    tmp_path: Path, base: Path, args: list[str], says: str
) -> None:
    """A moment without its offset, or without the WAL to reach it: exit 1, no WL_HOME made."""
    home = tmp_path / "home"
    code, said = _cli(
        home, "restore", str(base), *[str(tmp_path) if a == "WAL" else a for a in args]
    )
    assert code == 1
    assert says in said
    assert not home.exists()


def test_restore_wal_refuses_an_external_database(tmp_path: Path, base: Path) -> None:
    """Point-in-time recovery is into the embedded default; with WL_DATABASE_URL it says so."""
    code, said = _cli(
        tmp_path / "home",
        "restore",
        str(base),
        "--wal",
        str(tmp_path),
        WL_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
    )
    assert code == 1
    assert "docs/high-availability.md" in said


def test_restore_wal_never_overwrites_a_data_folder(tmp_path: Path, base: Path) -> None:
    """A WL_HOME that holds a database is refused by name, and left as it was."""
    home = tmp_path / "home"
    (home / "pgdata").mkdir(parents=True)
    (home / "pgdata" / "PG_VERSION").write_text("18\n")
    code, said = _cli(home, "restore", str(base), "--wal", str(tmp_path))
    assert code == 1
    assert "already holds a database; restore never overwrites one" in said
    assert sorted(p.name for p in (home / "pgdata").iterdir()) == ["PG_VERSION"]


def test_restore_wal_refuses_a_folder_that_is_no_base_backup(tmp_path: Path) -> None:
    """A folder without backup_label is named, with the command that makes a base backup."""
    code, said = _cli(tmp_path / "home", "restore", str(tmp_path), "--wal", str(tmp_path))
    assert code == 1
    assert "backup --base" in said


def test_backup_base_never_overwrites(tmp_path: Path) -> None:
    """An existing DEST is refused before any server is reached."""
    dest = tmp_path / "taken"
    dest.mkdir()
    code, said = _cli(
        tmp_path / "home",
        "backup",
        "--base",
        str(dest),
        WL_DATABASE_URL="postgresql://x@127.0.0.1:1/x",
    )
    assert code == 1
    assert "never overwrites" in said
