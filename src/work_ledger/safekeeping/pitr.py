"""`backup --base` and `restore --wal [--to TIME]`: a physical base backup and recovery from it
plus the WAL, to its end or to a moment (docs/high-availability.md).

A base backup is `pg_basebackup`'s plain copy of the server's data folder (the wheel's
program, so always the server's own version), with the WAL it needs to be consistent, and
for the embedded default WL_HOME's password file and token secret beside it: the copy holds
the superuser's SCRAM verifier, so only that password opens it, and the tokens verify only
under their secret. Restore copies it into a new
WL_HOME, lays the WAL of a mirror or archive folder (WL_WAL_MIRROR, or any folder of WAL
segments) into its pg_wal, and starts the embedded server in targeted recovery: it
replays up to TIME (every transaction committed at or before it, none after) or to the
last WAL record, then promotes itself and serves as the ledger.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import shutil
from pathlib import Path

from work_ledger.db.connect import connect
from work_ledger.embedded.owner import database_user
from work_ledger.embedded.programs import run
from work_ledger.embedded.server import PASSFILE, embedded_server_url
from work_ledger.errors import InvalidInput, InvariantViolation, Unavailable
from work_ledger.service.tokens import SECRET_FILE

# A WAL segment (timeline, log, segment: 24 hex digits) or a timeline's history file.
_WAL_NAME = re.compile(r"^([0-9A-F]{24}|[0-9A-F]{8}\.history)(\.partial)?$")
# WL_HOME's files a restored embedded ledger needs (its superuser's password, and the secret
# its API tokens were minted under), kept 0600 in the backup under these names.
HOME_FILES = {PASSFILE: "work-ledger.pgpass", SECRET_FILE: "work-ledger.secret"}
RECOVERY_SETTINGS = ("restore_command", "recovery_target_time", "recovery_target_action")
RECOVERY_SECONDS = 600.0


def base_backup(url: str, dest: Path, home: Path | None) -> int:
    """Copy the server at `url` into the new folder `dest`; returns its size in bytes."""
    if dest.exists():
        raise InvalidInput(f"{dest} already exists; a backup never overwrites: name a new DEST")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        args = ["-D", str(partial), "-F", "plain", "-X", "fetch", "-c", "fast", "--no-password"]
        run("pg_basebackup", args, url)
        for name, kept in HOME_FILES.items():
            if home is not None and (home / name).is_file():
                _copy_private(home / name, partial / kept)
        os.replace(partial, dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())


def _copy_private(src: Path, dest: Path) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(src.read_bytes())


def _refuse(src: Path, pgdata: Path) -> None:
    if not (src / "backup_label").is_file():
        raise InvalidInput(
            f"{src} is not a base backup (no backup_label): make one with "
            "`work-ledger backup --base DEST`; a file from `work-ledger backup` restores "
            "without --wal and --to"
        )
    if (pgdata / "PG_VERSION").exists():
        raise InvariantViolation(
            f"{pgdata} already holds a database; restore never overwrites one. "
            "Restore into a new WL_HOME",
            invariant="restore_into_empty_database",
        )


def _lay_wal(wal: Path, pg_wal: Path) -> int:
    """Copy every WAL segment and history file of `wal` into `pg_wal`; the segment still
    being received (`.partial`) goes under its own name, unless a complete copy exists."""
    if not wal.is_dir():
        raise InvalidInput(f"{wal} is not a folder of WAL segments (WL_WAL_MIRROR's folder)")
    laid = 0
    for path in sorted(wal.iterdir()):
        match = _WAL_NAME.match(path.name)
        if match is None or (match[2] and (wal / match[1]).exists()):
            continue
        shutil.copyfile(path, pg_wal / match[1])
        laid += 1
    return laid


def _recovery_settings(target: dt.datetime | None) -> str:
    # Segments are laid in pg_wal beforehand: recovery finds them there once the archive
    # (a command that always fails) has none.
    lines = ["restore_command = '/bin/false'", "recovery_target_action = 'promote'"]
    if target is not None:
        lines.append(f"recovery_target_time = '{target.isoformat()}'")
    return "\n# work-ledger restore, reset once promoted\n" + "\n".join(lines) + "\n"


def prepare(src: Path, home: Path, wal: Path | None, target: dt.datetime | None) -> int:
    """Lay out a data folder under `home` that recovers from `src` and `wal` when started;
    returns the number of WAL files laid."""
    pgdata = home / "pgdata"
    _refuse(src, pgdata)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if pgdata.exists():
        shutil.rmtree(pgdata)  # an empty or half-restored folder: no database in it
    shutil.copytree(src, pgdata, ignore=shutil.ignore_patterns(*HOME_FILES.values()))
    for name, kept in HOME_FILES.items():
        if (src / kept).is_file() and not (home / name).exists():
            _copy_private(src / kept, home / name)
    laid = 0 if wal is None else _lay_wal(wal, pgdata / "pg_wal")
    with open(pgdata / "postgresql.auto.conf", "a") as conf:
        conf.write(_recovery_settings(target))
    (pgdata / "recovery.signal").touch()
    os.chmod(pgdata, 0o700)
    user = database_user(pgdata)
    for folder, _, files in os.walk(pgdata):
        user.own(Path(folder))
        for name in files:
            user.own(Path(folder) / name)
    return laid


async def _promoted(url: str, pgdata: Path) -> None:
    """Wait until recovery has ended and the server writes; then forget the settings."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECOVERY_SECONDS
    while True:
        try:
            conn = await connect(url)
        except OSError as exc:  # the server stopped: recovery failed
            log = pgdata / "log"
            tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
            raise Unavailable(
                f"recovery stopped ({exc}); the server's log ends:\n{tail}\nIf it names a "
                "recovery target before the consistent point, restore an older base backup; "
                "if it was not reached, the WAL folder lacks the segments up to TIME"
            ) from exc
        try:
            if not await conn.fetchval("SELECT pg_is_in_recovery()"):
                for name in RECOVERY_SETTINGS:
                    await conn.execute(f"ALTER SYSTEM RESET {name}")
                await conn.execute("SELECT pg_reload_conf()")
                return
        finally:
            await conn.close()
        if loop.time() > deadline:
            raise Unavailable(f"recovery did not end within {RECOVERY_SECONDS:.0f}s")
        await asyncio.sleep(0.2)


async def recover(src: Path, home: Path, wal: Path | None, target: dt.datetime | None) -> int:
    """Restore `src` into the new WL_HOME `home` and recover; returns the WAL files laid.
    The server is left running (as any embedded start), with its admin URL attached."""
    laid = await asyncio.to_thread(prepare, src, home, wal, target)
    home = await asyncio.to_thread(lambda: home.expanduser().resolve())
    url = await asyncio.to_thread(embedded_server_url, home)
    await _promoted(url, home / "pgdata")
    return laid
