"""Tokens at rest: the database keeps an HMAC of each token, never the token."""

from __future__ import annotations

import hashlib
import hmac

import asyncpg
from asyncpg import Pool

from work_ledger.db.store import Store
from work_ledger.service.tokens import Role, TokenStore

SECRET = b"s" * 32


async def test_the_database_keeps_only_the_tokens_hmac(pool: Pool, raw: asyncpg.Connection) -> None:
    """The token's row holds its prefix and HMAC-SHA256(secret, token), not its secret part."""
    token, info = await TokenStore(Store(pool), SECRET).create(Role.OPERATOR, "op")
    row = await raw.fetchrow("SELECT * FROM wl_api_tokens WHERE prefix = $1", info.prefix)
    assert row is not None
    stored = repr(dict(row)) + bytes(row["token_hash"]).hex()
    assert token.split("_", 2)[2] not in stored
    assert bytes(row["token_hash"]) == hmac.digest(SECRET, token.encode(), hashlib.sha256)
