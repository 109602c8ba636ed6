"""`work-ledger export DEST`: the ledger as JSON Lines that outlive it (docs/export.md).

Four files (units, attempts, events, questions), one JSON object per line, written from
one repeatable-read snapshot, and `manifest.json` with each file's row count, size and
SHA-256, so a reader years from now can tell a complete export from a damaged one with
nothing but `sha256sum` and a JSON parser.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.errors import InvalidInput

FORMAT = "work-ledger-export"
VERSION = 1
FILES = {
    "units.jsonl": "export_units",
    "attempts.jsonl": "export_attempts",
    "events.jsonl": "export_events",
    "questions.jsonl": "export_questions",
}
PREFETCH = 5000


@dataclass(frozen=True, slots=True)
class FileEntry:
    rows: int
    bytes: int
    sha256: str


def _empty_destination(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidInput(
            f"{dest} already exists and is not an empty folder; export writes a new folder, "
            "never over an earlier export: name a new DEST"
        )
    dest.mkdir(parents=True, exist_ok=True)


async def _write(conn: asyncpg.Connection, query: str, path: Path) -> FileEntry:
    digest, rows, size = hashlib.sha256(), 0, 0
    with path.open("wb") as out:
        async for record in conn.cursor(query, prefetch=PREFETCH):
            line = record[0].encode() + b"\n"
            out.write(line)
            digest.update(line)
            rows, size = rows + 1, size + len(line)
    return FileEntry(rows, size, digest.hexdigest())


async def export(conn: asyncpg.Connection, dest: Path) -> dict[str, FileEntry]:
    """Write the export under `dest` (new or empty); returns the manifest's file entries."""
    _empty_destination(dest)
    files: dict[str, FileEntry] = {}
    async with (
        translated_errors(),
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        snapshot: dt.datetime = await conn.fetchval("SELECT now()")
        for name, query in FILES.items():
            files[name] = await _write(conn, QUERIES[query], dest / name)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "snapshot_at": snapshot.astimezone(dt.UTC).isoformat(),
        "files": {name: asdict(entry) for name, entry in files.items()},
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return files
