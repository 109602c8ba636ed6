"""Profile `work-ledger serve` under the http_claim load with py-spy (not part of run.py).

    uv venv /tmp/pyspy && uv pip install --python /tmp/pyspy/bin/python py-spy
    PATH=/tmp/pyspy/bin:$PATH uv run --group bench python bench/profile_serve.py [c] [seconds]

(a venv of its own: `uv run` re-syncs the project's venv and would remove it there.)

Starts its own embedded PostgreSQL and serve (as run.py does), drives claim+start at the
given concurrency, records serve with `py-spy record --format raw` and prints where the
main thread's samples went (inclusive share by function).
"""

from __future__ import annotations

import asyncio
import collections
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
import httpbench
from claims import seed_ledger
from harness import Server, measure, start_embedded

FRAME = re.compile(r"^(.*) \((?:.*site-packages/|.*src/)?(.*?):\d+\)$")


def summarize(raw: Path, top: int = 40) -> list[str]:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    main = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "serve (" not in stack:  # the event loop's thread only
            continue
        main += int(count)
        frames = [FRAME.sub(r"\1 (\2)", f) for f in stack.split(";")]
        own[frames[-1]] += int(count)  # collapsed stacks run root first, leaf last
        for name in set(frames):
            inclusive[name] += int(count)
    lines = [f"main-thread samples: {main}", "", "selected (inclusive share):"]
    for key in KEYS:
        n = sum(v for name, v in inclusive.items() if key in name)
        lines.append(f"{100 * min(n, main) / main:5.1f}%  {key}")
    lines += ["", "top frames below the server loop (inclusive share):"]
    below = [(name, n) for name, n in inclusive.most_common() if n < 0.7 * main]
    lines += [f"{100 * n / main:5.1f}%  {name}" for name, n in below[:top]]
    lines += ["", "top frames by own time (the leaf of the sample):"]
    lines += [f"{100 * n / main:5.1f}%  {name}" for name, n in own.most_common(top)]
    return lines


# Not additive: a frame's share includes everything it calls.
KEYS = (
    "run_in_threadpool",
    "solve_dependencies",
    "authenticate",
    "Ledger.claim",
    "Ledger.start",
    "Store.fetchrow",
    "serialize_response",
    "PrintLogger",
)


async def main(c: int, seconds: float) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    home = Path(tempfile.mkdtemp(prefix="wl-profile-"))
    server = await Server.attach(start_embedded(home / "pg"))
    tokens = await httpbench.build_token_template(server, c, home)
    async with server.fresh_database("profile", httpbench.TEMPLATE) as url:
        conn = await asyncpg.connect(url)
        await seed_ledger(conn, 30_000)
        await conn.close()
        async with httpbench.app_process("serve", url, home) as app:
            clients = [
                httpbench.MiniHttp(app.port, {"Authorization": f"Bearer {t}"}) for t in tokens[:c]
            ]
            for client in clients:
                await client.open()
            out = home / "serve.txt"
            recorder = await asyncio.create_subprocess_exec(
                spy, "record", "-p", str(app.process.pid), "-d", str(int(seconds) + 2),
                "-r", "200", "--format", "raw", "-o", str(out),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            sample = await measure(
                httpbench.claim_finish_ops(clients),
                server=server,
                warmup=1,
                duration=seconds,
                app=app.ps,
            )
            await recorder.wait()
            for client in clients:
                await client.close()
    print(sample.summary())
    print("\n".join(summarize(out)))


if __name__ == "__main__":
    args = [float(x) for x in sys.argv[1:3]]
    asyncio.run(main(int(args[0]) if args else 16, args[1] if len(args) > 1 else 10.0))
