"""Backup and restore of a large ledger, under load, through the CLI a user runs.

Builds a ledger of --units units in the embedded default (a fresh WL_HOME), one
`registered` event each, then starts `work-ledger serve` on it and --agents agents that
claim and release units (an attempt and two events per round) while
`work-ledger backup DEST` runs. It then restores DEST into a new WL_HOME with
`work-ledger restore` and times `work-ledger audit` there. Prints one table row per step:
seconds, bytes, and the writes the agents had acknowledged meanwhile.

    PYTHONPATH=tests uv run python -m bench.backup --units 1000000 [--agents 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from support.served import Served
from work_ledger.db.connect import DATABASE_NAME, connect, create_pool, with_database
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store
from work_ledger.embedded.server import embedded_server_url
from work_ledger.runtime import migrate_database
from work_ledger.service.tokens import Role, TokenStore

WORK_LEDGER = str(Path(sys.executable).with_name("work-ledger"))
SECRET = "bench-backup-secret"
BATCH = 50_000


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    return env | {"WL_HOME": str(home), "WL_SECRET": SECRET}


def timed_cli(home: Path, *args: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [WORK_LEDGER, *args], env=env_for(home), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return time.monotonic() - started


async def build(url: str, units: int) -> None:
    """`units` registered units, by the service's own statement in large batches."""
    conn = await connect(url)
    try:
        for start in range(0, units, BATCH):
            refs = [f"bench-{i:08d}" for i in range(start, min(start + BATCH, units))]
            domains = [f"d{i % 8}" for i in range(len(refs))]
            await conn.fetch(
                QUERIES["register_units"],
                refs,
                ["bench"] * len(refs),
                domains,
                [None] * len(refs),
                "bench",
            )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def agents_at_work(base: str, tokens: list[str], stop: asyncio.Event) -> int:
    """Agents claiming and releasing units until `stop`: how many writes were acknowledged."""
    acked = 0

    async def agent(token: str) -> None:
        nonlocal acked
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            while not stop.is_set():
                claim = (await http.post("/units/claim", json={})).json()
                unit = claim["unit"]["id"]
                body = {"to": "ready", "outcome": "failed", "reason": "bench"}
                released = await http.post(f"/units/{unit}/transition", json=body)
                acked += 1 + (released.status_code == 200)

    await asyncio.gather(*(agent(t) for t in tokens))
    return acked


def timed_backup(home: Path, dest: Path) -> tuple[float, int]:
    return timed_cli(home, "backup", str(dest)), dest.stat().st_size


async def serve_and_backup(home: Path, url: str, agents: int, dest: Path) -> dict[str, Any]:
    pool = await create_pool(url, min_size=1, max_size=1)
    try:
        minted = TokenStore(Store(pool), SECRET.encode())
        tokens = [(await minted.create(Role.AGENT, f"b{i}"))[0] for i in range(agents)]
    finally:
        await pool.close()
    serve = Served(env_for(home), home)
    await serve.start()
    try:
        stop = asyncio.Event()
        work = asyncio.create_task(agents_at_work(serve.url, tokens, stop))
        await asyncio.sleep(2)
        seconds, size = await asyncio.to_thread(timed_backup, home, dest)
        stop.set()
        acked = await work
        return {"backup_seconds": seconds, "backup_bytes": size, "acked_meanwhile": acked}
    finally:
        serve.stop()


async def main(args: Any) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="wl-bench-backup-"))
    source, target = scratch / "source", scratch / "target"
    atexit.register(shutil.rmtree, scratch, True)  # after the server's own exit hook
    try:
        # Deleted when this process exits (after serve, the last other user, has).
        admin = await asyncio.to_thread(embedded_server_url, source, delete_on_exit=True)
        url = with_database(admin, DATABASE_NAME)
        conn = await connect(admin)
        await conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        await conn.close()
        await migrate_database(url)
        started = time.monotonic()
        await build(url, args.units)
        built = time.monotonic() - started
        conn = await connect(url)
        db_bytes = await conn.fetchval("SELECT pg_database_size(current_database())")
        await conn.close()
        row = {"units": args.units, "build_seconds": built, "database_bytes": db_bytes}
        row |= await serve_and_backup(source, url, args.agents, scratch / "ledger.dump")
        row["restore_seconds"] = await asyncio.to_thread(
            timed_cli, target, "restore", str(scratch / "ledger.dump")
        )
        row["audit_seconds"] = await asyncio.to_thread(timed_cli, target, "audit")
        print(json.dumps(row), flush=True)
        if args.out:
            out = Path(args.out) / f"backup-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
            out.write_text(json.dumps(row, indent=2) + "\n")
    finally:
        shutil.rmtree(target, ignore_errors=True)
        (scratch / "ledger.dump").unlink(missing_ok=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--out", default="bench/results")
    asyncio.run(main(parser.parse_args()))
