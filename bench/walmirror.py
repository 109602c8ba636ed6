"""What WL_WAL_MIRROR costs: claim throughput through `work-ledger serve` on the embedded
default, with the WAL streamed synchronously to a second folder and without, in one run.

Rounds alternate (off, on, off, on, ...), each on a new WL_HOME: AGENTS agents claim a
unit and release it (two writes, each a commit) for --seconds; the figure is claims per
second. Then one connection commits COMMITS one-row inserts in turn: the median commit
time shows the round trip a commit waits for, which concurrent claims share (group commit).
The mirror's folder is on the same disk here, so the figures are the cost of the
synchronous round trip to pg_receivewal and its fsync, not of a second disk.

    uv run python bench/walmirror.py [--rounds 3] [--seconds 10] [--agents 8]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.embedded_load import embedded_env, embedded_url
from support.ports import free_ha_port
from support.served import Served, client, mint
from work_ledger.db.connect import connect
from work_ledger.service.tokens import Role

COMMITS = 300


async def _agent(url: str, token: str, stop: float) -> int:
    claims = 0
    async with client(url, token, timeout=30) as http:
        while time.monotonic() < stop:
            answer = (await http.post("/units/claim", json={})).json()
            if answer.get("attempt") is None:
                continue
            body = {"to": "ready", "outcome": "abandoned", "attempt_id": answer["attempt"]["id"]}
            done = await http.post(f"/units/{answer['unit']['id']}/transition", json=body)
            assert done.status_code == 200, done.text
            claims += 1
    return claims


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


async def one_round(mirror: bool, seconds: float, agents: int) -> tuple[float, float]:
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
        counts = await asyncio.gather(*(_agent(server.url, t, stop) for t in tokens))
        return sum(counts) / seconds, await _commit_ms(embedded_url(home))
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


async def main(args: Any) -> None:
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for n in range(args.rounds):
        for mirror in (False, True):
            rate, commit = await one_round(mirror, args.seconds, args.agents)
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--agents", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
