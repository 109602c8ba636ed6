"""What the read side adds to the WAL of a unit's life (`python -m bench.readside wal`).

For each database of bench/readside_write.py (fresh, warmed the same way): 64 connections
run lives with a fold every second for WINDOWS windows, then a CHECKPOINT, then one more
window. pg_walinspect (contrib, PostgreSQL 16+) reads the WAL of the last window and of the
one before the checkpoint, and sums it per relation (each record counted once, under the
first block it names) and in full-page images, per life. After a checkpoint the first
change of each page writes a full-page image of it (and, with data checksums, as
PostgreSQL 18's initdb enables by default, so does the first hint bit a read sets), so
rows written on random pages cost far more than their size. This is how the rank rows of
migration 0017 were found (see 0021's header).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from bench.readside_write import FOLDED, TRIGGERS, VARIANTS, WARM_SECONDS, _concurrent, _fresh
from work_ledger.db.connect import connect

WINDOWS = 3
WINDOW_SECONDS = 4.0
WORKERS = 64
TOP = 12
# Each record once, under its first block's relation; its full-page images summed apart.
BY_RELATION = """
SELECT coalesce(pg_filenode_relation(reltablespace, relfilenode)::regclass::text,
                relfilenode::text) AS relation,
       sum(record_length) FILTER (WHERE block_id = 0) AS bytes,
       coalesce(sum(block_fpi_length), 0) AS fpi_bytes
FROM pg_get_wal_block_info($1, $2, false)
WHERE reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1
"""


async def _window(
    conns: list[asyncpg.Connection],
    folder: asyncpg.Connection | None,
    probe: asyncpg.Connection,
) -> dict[str, Any]:
    start = await probe.fetchval("SELECT pg_current_wal_lsn()")
    rate = await _concurrent(conns, WINDOW_SECONDS, folder)
    end = await probe.fetchval("SELECT pg_current_wal_lsn()")
    lives = rate * WINDOW_SECONDS
    total = float(await probe.fetchval("SELECT pg_wal_lsn_diff($1, $2)", end, start))
    rows = await probe.fetch(BY_RELATION, start, end)
    per = sorted(
        (
            {
                "relation": r["relation"],
                "kb_per_life": round(float(r["bytes"] or 0) / lives / 1024, 3),
                "fpi_kb_per_life": round(float(r["fpi_bytes"]) / lives / 1024, 3),
            }
            for r in rows
        ),
        key=lambda r: -float(r["kb_per_life"]),
    )
    return {
        "lives_per_s": round(rate, 1),
        # The server's WAL includes other databases' (autovacuum of earlier runs, say).
        "server_wal_kb_per_life": round(total / lives / 1024, 2),
        "database_wal_kb_per_life": round(
            sum(float(r["bytes"] or 0) for r in rows) / lives / 1024, 2
        ),
        "fpi_kb_per_life": round(sum(float(r["fpi_bytes"]) for r in rows) / lives / 1024, 2),
        "relations": per[:TOP],
    }


async def measure_wal(
    admin_url: str, variants: tuple[str, ...] = ("0019", "off")
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in variants:
        database, skip = VARIANTS[name]
        url = await _fresh(admin_url, database, skip)
        probe = await connect(url)
        conns = [await connect(url) for _ in range(WORKERS)]
        folder = await connect(url) if name in FOLDED else None
        try:
            await probe.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            if name == "off":
                for trigger in TRIGGERS:
                    await probe.execute(f"ALTER TABLE work_units DISABLE TRIGGER {trigger}")
            await _concurrent(conns, WARM_SECONDS, folder)
            for _ in range(WINDOWS - 1):
                await _concurrent(conns, WINDOW_SECONDS, folder)
            steady = await _window(conns, folder, probe)
            await probe.execute("CHECKPOINT")
            found[name] = {
                "steady": steady,
                "after_checkpoint": await _window(conns, folder, probe),
            }
        finally:
            for conn in (probe, *conns, *([folder] if folder else [])):
                await conn.close()
        print(f"{name}: done", flush=True)
    return found
