"""The commands a keyed write sends in one round trip (`db/store.commands`): the values
written into them read back as themselves, whatever they hold, and the outcome's UPDATE
finds its key through the primary key."""

from __future__ import annotations

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store, commands

TEXTS = [
    "agent:bench-agent-1/w-0",
    "it's",
    "''",
    "back\\slash",
    "\\'; SELECT 1; --",
    "E'x'",
    "'; DROP TABLE work_units; --",
    "$$ $x$",
    "{scope}",
    "ünïcødé ✓ 🦀",
]
DIGEST = b"\x00'\\" + bytes(range(256))
FIND = "SELECT scope, key, request_hash FROM wl_idempotency_keys WHERE request_hash = $1"


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_text_written_into_commands_reads_back_as_itself(
    database_url: str, conforming: str
) -> None:
    """Quotes, backslashes (with standard_conforming_strings on and off), dollar quotes,
    braces and characters past ASCII are stored as sent: none of them ends the literal."""
    settings = {"standard_conforming_strings": conforming}
    pool = await create_pool(database_url, min_size=1, max_size=1, server_settings=settings)
    try:
        store = Store(pool)
        for text in TEXTS:
            tx, status = await store.begin(
                "idempotency_begin_reserve", scope=text, key=text, digest=DIGEST, takeover=0
            )
            try:
                assert status == "SELECT 1"  # the key is this request's
                row = await tx.conn.fetchrow(FIND, DIGEST)
            finally:
                await tx.end()
            assert row is not None
            assert (row["scope"], row["key"], row["request_hash"]) == (text, text, DIGEST)
        assert await pool.fetchval("SELECT count(*) FROM work_units") == 0
    finally:
        await pool.close()


def test_text_holding_a_nul_is_refused_before_it_is_sent() -> None:
    """A NUL would end the query string PostgreSQL reads: refused here, not cut there."""
    values = {"scope": "a\x00b", "key": "k", "digest": b"", "takeover": 0}
    with pytest.raises(ValueError, match="NUL"):
        commands("idempotency_begin_reserve", values)


async def test_the_outcome_finds_its_key_by_the_primary_key(raw: asyncpg.Connection) -> None:
    """The UPDATE that stores a keyed write's outcome (in wl_complete_key, 0033) searches
    wl_idempotency_keys by its primary key with the values as `commands` writes them in
    (a text of collation "C" could not use it). Scans are switched off, so a plan that still
    scans could not use the index at all; the transaction's own statistics count both."""
    sent = commands(
        "idempotency_complete_commit",
        {
            "scope": "agent:a",
            "key": "k-1",
            "status": 200,
            "content_type": "application/json",
            "body": b"{}",
        },
    )
    call, commit = sent.rsplit(";", 1)
    assert commit.strip() == "COMMIT"
    counts = "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = $1"
    async with raw.transaction():
        await raw.execute("SET LOCAL enable_seqscan = off")
        await raw.execute(call)
        scans = await raw.fetchrow(counts, "wl_idempotency_keys")
    assert scans is not None
    assert (scans["seq_scan"], scans["idx_scan"]) == (0, 1), dict(scans)
