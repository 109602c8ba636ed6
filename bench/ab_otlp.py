"""Issue 40's speed goal as a same-round ratio on one `work-ledger serve` (not part of
run.py): the claim path while 64 agents export Claude Code telemetry every 5 s to
POST /otlp/v1/logs, against the claim path alone.

    uv run --group bench python -m bench.ab_otlp [--c 64] [--agents 64] [--rounds 6] [--seconds 5]

One embedded PostgreSQL, one database of 200,000 ready units, one serve. `--agents` more
agents each claim a unit of their own first; then each round measures claim+start (the
window's `--c` clients, as bench.ab_money) twice back to back, A first in even rounds and B
first in odd ones: A alone, B while every exporting agent posts, every `--every` seconds
(staggered), the batch Claude Code 2.1.197 really sent (tests/cli/fixtures/claude_otlp,
its JSON form: 9 records, 3 of them api_request), each time with a fresh session id, so
every record is new and written (never a replay). It prints each window and the medians of
the same-round ratios B/A (goal: items per second ≥ 0.95). The JSON goes to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import datetime as dt
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from bench import httpbench
from bench.ab_money import summarize, window
from bench.ab_serve import claim_start_ops
from bench.claims import seed_ledger
from bench.harness import Server, load_average, start_embedded

HERE = Path(__file__).resolve().parent
CAPTURED = HERE.parent / "tests" / "cli" / "fixtures" / "claude_otlp" / "http-json-1.body"
CAPTURED_ATTEMPT = "0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b"


def _session_of(text: str) -> str:
    body = json.loads(text)
    for pair in body["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["attributes"]:
        if pair["key"] == "session.id":
            return str(pair["value"]["stringValue"])
    raise ValueError("the captured batch names no session.id")


async def exporter(port: int, token: str, attempt: str, offset: float, every: float) -> None:
    """One agent's exporter: its batch every `every` seconds, a new session's each time,
    on a connection of its own (serve closes one idle for 5 s, as an exporter's would be)."""
    template = CAPTURED.read_text().replace(CAPTURED_ATTEMPT, attempt)
    session = _session_of(template)
    await asyncio.sleep(offset)
    while True:
        batch = json.loads(template.replace(session, str(uuid.uuid4())))
        client = httpbench.MiniHttp(port, {"Authorization": f"Bearer {token}"})
        await client.open()
        try:
            status, answer = await client.request("POST", "/otlp/v1/logs", batch)
        finally:
            await client.close()
        if status != 200 or (answer or {}).get("partialSuccess"):
            raise RuntimeError(f"OTLP export -> {status}: {answer}")
        await asyncio.sleep(every)


async def claim_one(port: int, token: str) -> str:
    client = httpbench.MiniHttp(port, {"Authorization": f"Bearer {token}"})
    await client.open()
    try:
        ids = httpbench._ids(await client.post("/units/claim", {}))
        assert ids is not None, "no unit to claim"
        return ids[1]
    finally:
        await client.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="wl-ab-otlp-"))
    result: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_average_start": load_average(),
        "agents": args.agents,
        "every_s": args.every,
        "windows": [],
    }
    atexit.register(shutil.rmtree, home, True)
    server = await Server.attach(start_embedded(home / "pg"))
    tokens = await httpbench.build_token_template(server, args.c + args.agents, home)
    claimers, exporters = tokens[: args.c], tokens[args.c :]
    async with server.fresh_database("abo", httpbench.TEMPLATE) as url:
        conn = await asyncpg.connect(url)
        try:
            await seed_ledger(conn, 200_000)
            async with httpbench.app_process("serve", url, home) as app:
                attempts = [await claim_one(app.port, t) for t in exporters]
                for r in range(args.rounds):
                    for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                        senders = []
                        if side == "B":
                            senders = [
                                asyncio.create_task(
                                    exporter(
                                        app.port, t, a, i * args.every / len(attempts), args.every
                                    )
                                )
                                for i, (t, a) in enumerate(zip(exporters, attempts, strict=True))
                            ]
                        try:
                            figure = await window(
                                server, app, claimers, claim_start_ops, args.seconds
                            )
                        finally:
                            for task in senders:
                                task.cancel()
                            for task in senders:
                                with contextlib.suppress(asyncio.CancelledError):
                                    await task
                        row = {"round": r, "what": "otlp", "c": args.c, "side": side, **figure}
                        result["windows"].append(row)
                        print(
                            f"round {r} c={args.c} {side}: {figure['items_per_s']:.0f}/s, app "
                            f"{figure['app_cpu_ms_per_item']:.3f} ms/item, other "
                            f"{figure['other_cpu_pct']:.0f} %",
                            flush=True,
                        )
                result["telemetry_records"] = await conn.fetchval(
                    "SELECT count(*) FROM telemetry_records"
                )
        finally:
            await conn.close()
    result["load_average_end"] = load_average()
    result["medians"] = summarize(result["windows"])
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--c", type=int, default=64, help="claiming clients")
    p.add_argument("--agents", type=int, default=64, help="agents exporting telemetry")
    p.add_argument("--every", type=float, default=5.0, help="each agent's export interval (s)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=5.0, help="each window's length")
    p.add_argument("--out", default=str(HERE / "results"))
    arguments = p.parse_args()
    outcome = asyncio.run(main(arguments))
    for row in outcome["medians"]:
        print(json.dumps(row))
    print(f"telemetry records written: {outcome['telemetry_records']}")
    stamp = outcome["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = Path(arguments.out) / f"ab-otlp-{stamp}.json"
    path.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
    print(f"raw results: {path}")
