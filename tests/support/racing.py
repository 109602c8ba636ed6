"""Ledgers that truly race: each over a pool of one connection of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.service.ledger import Ledger


@asynccontextmanager
async def racing_ledgers(database_url: str, count: int) -> AsyncIterator[list[Ledger]]:
    pools = await asyncio.gather(
        *(create_pool(database_url, min_size=1, max_size=1) for _ in range(count))
    )
    try:
        yield [Ledger(Store(p), lease_seconds=60) for p in pools]
    finally:
        await asyncio.gather(*(p.close() for p in pools))
