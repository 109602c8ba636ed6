"""Several `serve` replicas on one database behave as one ledger (DESIGN §11)."""

# ruff: noqa: F811  (a test taking the shared `start_replicas` fixture names it as a parameter)

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from support.replicas import StartReplicas, start_replicas  # noqa: F401  (the shared fixture)
from support.served import SECRET, Served, client, mint
from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.service.tokens import OPERATOR_TOKEN_FILE, Role, TokenStore

pytestmark = pytest.mark.faults


async def test_first_token_mint_races_on_many_connections(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """Eight connections minting the first token at once, 15 rounds: one wins each round."""
    pools = [await create_pool(database_url, min_size=1, max_size=1) for _ in range(8)]
    try:
        stores = [TokenStore(Store(pool), SECRET.encode()) for pool in pools]
        for _ in range(15):
            minted = await asyncio.gather(*(s.create_first(Role.OPERATOR, "op") for s in stores))
            assert sum(m is not None for m in minted) == 1
            live = "SELECT count(*) FROM wl_api_tokens WHERE revoked_at IS NULL"
            assert await raw.fetchval(live) == 1
            await raw.execute("UPDATE wl_api_tokens SET revoked_at = now()")
        assert await raw.fetchval("SELECT count(*) FROM wl_api_tokens") == 15
    finally:
        for pool in pools:
            await pool.close()


async def test_two_replicas_started_together_act_as_one_ledger(
    start_replicas: StartReplicas, database_url: str, raw: asyncpg.Connection
) -> None:
    """Started at once on an empty ledger they mint one operator token; a claim long-polling
    on B gets the unit released through A; a token revoked is refused by B, which cached it."""
    assert await raw.fetchval("SELECT count(*) FROM wl_api_tokens") == 0
    a, b = await start_replicas(2)
    rows = await raw.fetch("SELECT role, principal FROM wl_api_tokens")
    assert [(r["role"], r["principal"]) for r in rows] == [("operator", "operator")]
    assert [(a.home / OPERATOR_TOKEN_FILE).exists(), (b.home / OPERATOR_TOKEN_FILE).exists()] in (
        [True, False],
        [False, True],
    )
    woke = await _waiter_wakes_across(a, b, database_url)
    refused = await _revocation_reaches(b, database_url)
    print(
        f"\nB's waiter woke {woke:.2f} s after the release on A; "
        f"B refused the revoked token {refused:.2f} s after the revocation"
    )


async def _waiter_wakes_across(a: Served, b: Served, database_url: str) -> float:
    op, one, two = await mint(
        database_url, [(Role.OPERATOR, "op"), (Role.AGENT, "agent-1"), (Role.AGENT, "agent-2")]
    )
    async with client(a.url, op) as operator:
        units = {"units": [{"external_ref": "only", "fleet": "f"}]}
        assert (await operator.post("/units", json=units)).status_code == 200
    async with client(a.url, one, timeout=30) as on_a, client(b.url, two, timeout=60) as on_b:
        held = (await on_a.post("/units/claim", json={})).json()
        waiter = asyncio.create_task(on_b.post("/units/claim", json={"wait_seconds": 40}))
        await asyncio.sleep(1.0)
        assert not waiter.done()  # B has nothing to give yet: it waits
        body = {"to": "ready", "outcome": "abandoned", "attempt_id": held["attempt"]["id"]}
        released = await on_a.post(f"/units/{held['unit']['id']}/transition", json=body)
        released_at = time.monotonic()
        assert released.status_code == 200
        got = await waiter
        woke = time.monotonic() - released_at
    assert got.json()["unit"]["id"] == held["unit"]["id"]
    assert woke < 30  # long before its 40 s wait ran out
    return woke


async def _revocation_reaches(b: Served, database_url: str) -> float:
    (token,) = await mint(database_url, [(Role.AGENT, "agent-r")])
    async with client(b.url, token) as on_b:
        assert (await on_b.get("/units")).status_code == 200  # verified, cached on B
        pool = await create_pool(database_url, min_size=1, max_size=1)
        try:  # what `token revoke` does, beside any replica
            assert await TokenStore(Store(pool), SECRET.encode()).revoke(token.split("_")[1])
        finally:
            await pool.close()
        revoked_at = time.monotonic()
        while (status := (await on_b.get("/units")).status_code) == 200:
            assert time.monotonic() - revoked_at < 50, "B still takes the revoked token"
            await asyncio.sleep(0.05)
        refused = time.monotonic() - revoked_at
    assert status == 401
    return refused
