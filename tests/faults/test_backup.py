"""Safekeeping with real processes: backup under load, restore into a new WL_HOME, export."""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import asyncpg
import pytest

from support.history import check
from support.served import StartServer, cli, client, ledger_env, mint_fleet
from support.worked import worked
from support.workload import Chaos, Recorder, Workload
from work_ledger.db.connect import DATABASE_NAME, connect, with_database
from work_ledger.embedded.server import embedded_server_url
from work_ledger.service.ledger import Ledger

pytestmark = pytest.mark.faults
TABLES = {
    "units.jsonl": "work_units",
    "attempts.jsonl": "work_unit_attempts",
    "events.jsonl": "work_unit_events",
    "questions.jsonl": "blocking_questions",
}


async def _loaded(start_server: StartServer, agents: int = 6) -> tuple[Workload, dict[str, str]]:
    """A server with agents at work on it (the caller stops them)."""
    server = await start_server()
    names = [f"keep-agent-{i}" for i in range(agents)]
    operator, triage, tokens = await mint_fleet(server.env["WL_DATABASE_URL"], names)
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"keep-{i}", "fleet": "f"} for i in range(300)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    chaos = Chaos(client_timeout=0.0, die=0.05, refused=0.1, duplicate=0.1, block=0.2)
    return Workload(server.url, tokens, triage, chaos=chaos), server.env


def _before(recorder: Recorder, moment: float) -> Recorder:
    """The history as a backup begun at `moment` must hold it: writes answered before are
    acknowledged; anything answered later is in doubt (it may or may not be in the copy)."""
    kept = Recorder()
    for op in recorder.ops:
        if op.ended >= moment:
            op = dataclasses.replace(op, status=None, response=None, replayed=False)
        kept.ops.append(op)
    return kept


async def test_backup_under_load_restores_into_a_new_home_with_every_earlier_write(
    start_server: StartServer, tmp_path: Path
) -> None:
    """`backup` while agents work; `restore` into a new WL_HOME (embedded): audit clean, and
    every write acknowledged before the backup began is there; a restore over the live ledger
    is refused."""
    workload, env = await _loaded(start_server)
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(2.0)
    began = time.monotonic()
    code, out = await cli(env, "backup", str(tmp_path / "ledger.dump"))
    ended = time.monotonic()
    await asyncio.sleep(0.5)
    workload.stop.set()
    await load
    assert code == 0, out
    code, refused = await cli(env, "restore", str(tmp_path / "ledger.dump"))
    assert code == 1  # never over the ledger being served
    assert "already holds a ledger" in " ".join(refused.split()), refused
    during = [op for op in workload.recorder.ops if began <= op.ended <= ended and op.acked]
    assert during, "nothing was acknowledged while the backup ran: it did not run under load"

    # Not under pytest's folders, which PostgreSQL's own user may not enter (as in conftest).
    home = Path(tempfile.mkdtemp(prefix="wl-restored-"))
    # Attaching below makes this process stop that server and delete its data at exit;
    # the folder goes after it (exit hooks run last-registered first).
    atexit.register(shutil.rmtree, home, True)
    restored_env = ledger_env("", home)
    del restored_env["WL_DATABASE_URL"]  # the embedded default, in a new WL_HOME
    code, out = await cli(restored_env, "restore", str(tmp_path / "ledger.dump"))
    assert code == 0, out
    code, audited = await cli(restored_env, "audit")
    assert code == 0, audited

    url = with_database(
        await asyncio.to_thread(embedded_server_url, home, delete_on_exit=True), DATABASE_NAME
    )
    conn: asyncpg.Connection = await connect(url)
    try:
        report = await check(conn, _before(workload.recorder, began))
    finally:
        await conn.close()
    print(f"\nbackup under load ({len(during)} writes acknowledged meanwhile):\n{report.summary()}")
    assert report.violations == []


async def test_export_is_readable_without_the_ledger(
    ledger: Ledger, database_url: str, raw: asyncpg.Connection, tmp_path: Path
) -> None:
    """`export`: four JSON Lines files whose counts and SHA-256 match the manifest and the
    tables, read back with nothing but json and hashlib; an existing DEST is refused."""
    await worked(ledger)
    env = ledger_env(database_url, tmp_path)
    dest = tmp_path / "export"
    code, out = await cli(env, "export", str(dest))
    assert code == 0, out
    manifest = json.loads((dest / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"]) == ("work-ledger-export", 1)
    read: dict[str, list[dict[str, object]]] = {}
    for name, table in TABLES.items():
        data = (dest / name).read_bytes()
        read[name] = [json.loads(line) for line in data.splitlines()]
        entry = manifest["files"][name]
        assert (entry["rows"], entry["bytes"]) == (len(read[name]), len(data))
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert len(read[name]) == await raw.fetchval(f"SELECT count(*) FROM {table}")
    assert sum(u["cost_cents"] for u in read["units.jsonl"]) == 100 + 101 + 102
    done = [u for u in read["units.jsonl"] if u["external_ref"] == "x-1"]
    assert (done[0]["state"], done[0]["disposition"]) == ("done", "MIGRATED")
    assert [q["question"] for q in read["questions.jsonl"]] == ["which schema?"]
    assert {e["event_type"] for e in read["events.jsonl"]} >= {"registered", "claimed", "disposed"}
    code, refused = await cli(env, "export", str(dest))
    assert code == 1
    assert "already exists" in " ".join(refused.split()), refused
