"""A bare ASGI endpoint running the benchmark's hand-written ledger statements.

No framework, no auth check, no validation beyond what the SQL needs: the floor an HTTP
claim can reach on this machine, so that `work-ledger serve` is measured against it. It
answers the same paths and bodies the benchmark sends to the real API:

    POST /units/claim                  → raw ledger_claim        → {"unit": {...}, "attempt": {...}}
    POST /units/{id}/transition        → ledger_finish | ledger_verify
    POST /attempts/{id}/cost           → ledger_cost
    POST /units/{id}/dispose           → ledger_dispose

The acting agent is the X-WL-Agent header when sent, else the bearer token itself (a
token here is just a name). Run: uvicorn bench.asgi_raw:app (BENCH_DATABASE_URL,
BENCH_POOL_SIZE in the environment).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from work_ledger.db.queries import parse_named_sql

RAW = parse_named_sql((Path(__file__).parent / "raw.sql").read_text(encoding="utf-8"))
LEASE_SECONDS = 900
_pool: asyncpg.Pool | None = None


async def _body(receive: Any) -> dict[str, Any]:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    raw = b"".join(chunks)
    return json.loads(raw) if raw else {}


async def _send(send: Any, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _agent(scope: dict[str, Any]) -> str:
    headers = dict(scope["headers"])
    named = headers.get(b"x-wl-agent")
    if named:
        return named.decode()
    return headers.get(b"authorization", b"Bearer anonymous").decode().split(" ", 1)[-1]


async def _route(scope: dict[str, Any], body: dict[str, Any]) -> tuple[int, Any]:
    assert _pool is not None
    parts = scope["path"].strip("/").split("/")
    agent = _agent(scope)
    if parts == ["units", "claim"]:
        row = await _pool.fetchrow(RAW["ledger_claim"], agent, LEASE_SECONDS)
        if row is None:
            return 200, {"unit": None, "attempt": None, "resumed": False}
        unit = {"id": str(row["unit_id"]), "state": "claimed", "claimed_by": agent}
        attempt = {"id": str(row["attempt_id"]), "unit_id": str(row["unit_id"])}
        return 200, {"unit": unit, "attempt": attempt, "resumed": False}
    if parts[0] == "units" and parts[-1] == "transition":
        unit_id, attempt_id = uuid.UUID(parts[1]), uuid.UUID(body["attempt_id"])
        if body["to"] == "in_progress":
            await _pool.execute(RAW["ledger_finish"], unit_id, attempt_id, agent)
        else:
            await _pool.execute(
                RAW["ledger_verify"], unit_id, attempt_id, agent, body["evidence_url"]
            )
        return 200, {"unit": {"id": parts[1]}, "attempt": {"id": body["attempt_id"]}}
    if parts[0] == "attempts" and parts[-1] == "cost":
        await _pool.execute(RAW["ledger_cost"], uuid.UUID(parts[1]), agent, body["cost_cents"])
        return 200, {"attempt": {"id": parts[1]}}
    if parts[0] == "units" and parts[-1] == "dispose":
        unit_id, attempt_id = uuid.UUID(parts[1]), uuid.UUID(body["attempt_id"])
        await _pool.execute(RAW["ledger_dispose"], unit_id, attempt_id, agent)
        return 200, {"unit": {"id": parts[1], "state": "done"}}
    if parts == ["healthz"]:
        return 200, {"status": "ok"}
    return 404, {"detail": "not found"}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _pool
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _pool = await asyncpg.create_pool(
                    os.environ["BENCH_DATABASE_URL"],
                    min_size=1,
                    max_size=int(os.environ.get("BENCH_POOL_SIZE", "10")),
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if _pool is not None:
                    await _pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = await _body(receive)
    status, payload = await _route(scope, body)
    await _send(send, status, payload)
