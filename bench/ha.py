"""High availability, each a program with servers of its own (the test suite's helpers,
`tests/support`; `bench.run` puts `tests` on the PYTHONPATH):

    PYTHONPATH=tests uv run python -m bench.ha backup --units 1000000 [--agents 4] [--out DIR]
    PYTHONPATH=tests uv run python -m bench.ha failover [--rounds 3] [--seconds 3] [--lag 0.5]
    PYTHONPATH=tests uv run python -m bench.ha walmirror [--rounds 3] [--seconds 10] [--agents 8]

`backup` times backup (under agents' load), restore and audit of a large ledger;
`failover` runs tests/faults/test_database_failover.py's scenario per standby setting;
`walmirror` compares claims per second and commit time with WL_WAL_MIRROR on and off (the
mirror on the same disk: the cost of the synchronous round trip, not of a second disk).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.claims import seed_ledger
from support.embedded_load import embedded_env, embedded_url
from support.failover import Failover, run_failover
from support.pgcluster import build_pair, remove
from support.ports import free_ha_port
from support.served import SECRET, Served, client, ledger_env, mint
from work_ledger.db.connect import (
    DATABASE_NAME,
    connect,
    ensure_database,
    with_database,
)
from work_ledger.embedded.server import embedded_server_url
from work_ledger.runtime import migrate_database
from work_ledger.service.tokens import Role

WORK_LEDGER = str(Path(sys.executable).with_name("work-ledger"))


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    return env | {"WL_HOME": str(home), "WL_SECRET": SECRET}


def timed_cli(home: Path, *args: str) -> float:
    started = time.monotonic()
    cmd = [WORK_LEDGER, *args]
    done = subprocess.run(cmd, env=env_for(home), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return time.monotonic() - started


async def claim_release(url: str, token: str, stop: Callable[[], bool]) -> int:
    """An agent claiming a unit and releasing it until `stop()`: how many it claimed."""
    claims = 0
    async with client(url, token, timeout=30) as http:
        while not stop():
            answer = (await http.post("/units/claim", json={})).json()
            if answer.get("attempt") is None:
                continue
            body = {"to": "ready", "outcome": "abandoned", "attempt_id": answer["attempt"]["id"]}
            done = await http.post(f"/units/{answer['unit']['id']}/transition", json=body)
            assert done.status_code == 200, done.text
            claims += 1
    return claims


async def serve_and_backup(home: Path, url: str, agents: int, dest: Path) -> dict[str, Any]:
    tokens = await mint(url, [(Role.AGENT, f"b{i}") for i in range(agents)])
    serve = Served(env_for(home), home)
    await serve.start()
    try:
        stop = asyncio.Event()
        work = [asyncio.create_task(claim_release(serve.url, t, stop.is_set)) for t in tokens]
        await asyncio.sleep(2)
        seconds = await asyncio.to_thread(timed_cli, home, "backup", str(dest))
        stop.set()
        acked = 2 * sum(await asyncio.gather(*work))  # a claim and a release each
        size = await asyncio.to_thread(os.path.getsize, dest)
        return {"backup_seconds": seconds, "backup_bytes": size, "acked_meanwhile": acked}
    finally:
        serve.stop()


async def backup(args: Any) -> None:
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
        conn = await connect(url)  # registered units, each with its `registered` event
        await seed_ledger(conn, args.units)
        await conn.close()
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


DATABASE = "ledger"


async def failover_round(synchronous: bool, seconds: float, lag: float) -> Failover:
    base = Path(tempfile.mkdtemp(prefix="wl-bench-failover-"))
    servers = Path(tempfile.mkdtemp(prefix="wl-bench-failover-pg-"))  # owned by PostgreSQL's user
    pair = await asyncio.to_thread(build_pair, servers, synchronous=synchronous)
    started: list[Served] = []

    async def start(url: str, **env: str) -> Served:
        home = base / f"home-{len(started)}"
        home.mkdir()
        server = Served(ledger_env(url, home, **env), home)
        started.append(server)
        await server.start()
        return server

    try:
        await ensure_database(pair.primary.url(), DATABASE)
        await migrate_database(pair.primary.url(DATABASE))
        return await run_failover(pair, DATABASE, start, load_seconds=seconds, lag_seconds=lag)
    finally:
        for server in started:
            server.stop()
        await asyncio.to_thread(pair.stop)
        remove(servers)
        remove(base)


async def failover(args: Any) -> None:
    for synchronous in (True, False):
        setting = "synchronous" if synchronous else "asynchronous"
        for n in range(args.rounds):
            result = await failover_round(synchronous, args.seconds, args.lag)
            lost = [v for v in result.report.violations if "acknowledged" in v]
            print(
                f"== {setting} standby, round {n + 1}: {len(result.report.violations)} "
                f"violations ({len(lost)} naming an acknowledged write)\n{result.summary()}\n",
                flush=True,
            )


COMMITS = 300


async def _commit_ms(url: str) -> float:
    conn = await connect(url)
    try:
        await conn.execute("CREATE TABLE bench_commit (x int)")  # logged: each commit waits
        times = []
        for _ in range(COMMITS):
            started = time.perf_counter()
            await conn.execute("INSERT INTO bench_commit VALUES (1)")
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000
    finally:
        await conn.close()


async def mirror_round(mirror: bool, seconds: float, agents: int) -> tuple[float, float]:
    base = Path(tempfile.mkdtemp(prefix="wl-bench-mirror-"))
    extra = {"WL_WAL_MIRROR": str(base / "mirror")} if mirror else {}
    home = base / "home"
    home.mkdir()
    # Ports clear of the test runs' blocks: another run's server must not answer for ours.
    server = Served(embedded_env(home, **extra), home, port=free_ha_port())
    try:
        await server.start()
        operator, *tokens = await mint(
            embedded_url(home),
            [(Role.OPERATOR, "op")] + [(Role.AGENT, f"a{i}") for i in range(agents)],
        )
        async with client(server.url, operator, timeout=30) as op:
            units = [{"external_ref": f"u{i}", "fleet": "f"} for i in range(agents * 4)]
            assert (await op.post("/units", json={"units": units})).status_code == 200
        stop = time.monotonic() + seconds
        agents = (claim_release(server.url, t, lambda: time.monotonic() > stop) for t in tokens)
        counts = await asyncio.gather(*agents)
        return sum(counts) / seconds, await _commit_ms(embedded_url(home))
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


async def walmirror(args: Any) -> None:
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for n in range(args.rounds):
        for mirror in (False, True):
            rate, commit = await mirror_round(mirror, args.seconds, args.agents)
            figures[mirror].append((rate, commit))
            print(
                f"round {n + 1}, mirror {'on ' if mirror else 'off'}: {rate:.0f} claims/s, "
                f"commit {commit:.2f} ms",
                flush=True,
            )
    for i, name in enumerate(("claims/s", "commit ms")):
        off = [f[i] for f in figures[False]]
        on = [f[i] for f in figures[True]]
        ratios = [b / a for a, b in zip(off, on, strict=True)]
        print(
            f"median {name}: off {statistics.median(off):.2f}, on {statistics.median(on):.2f}; "
            f"median same-round ratio on/off {statistics.median(ratios):.2f}"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="program", required=True)
    p = sub.add_parser("backup", help="backup and restore of a large ledger under load")
    p.add_argument("--units", type=int, default=1_000_000)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--out", default="bench/results")
    p = sub.add_parser("failover", help="database failover, synchronous and asynchronous")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="load before and after")
    p.add_argument(
        "--lag", type=float, default=0.5, help="seconds the standby is held behind before the kill"
    )
    p = sub.add_parser("walmirror", help="claims per second with WL_WAL_MIRROR on and off")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--agents", type=int, default=8)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    program = {"backup": backup, "failover": failover, "walmirror": walmirror}[arguments.program]
    asyncio.run(program(arguments))
