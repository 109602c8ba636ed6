"""API tokens: mint, hash, verify, list and revoke (DESIGN §7).

A token reads `wl_<prefix>_<secret>`. The database keeps only HMAC-SHA256(server secret,
token), keyed by the public prefix; verification recomputes the HMAC and compares it in
constant time. The server secret is `WL_SECRET`, or a random one kept in `WL_HOME/secret`
(mode 0600, created on first use); every replica must share it.

Verified tokens are cached in-process for `CACHE_SECONDS`, so the hot path costs one HMAC
and no database round trip; a revocation therefore takes effect within that many seconds.
A token whose prefix was never minted costs no lookup of its own (`KnownPrefixes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.db.store import Store, translated_errors
from work_ledger.errors import InvalidInput, Unauthorized

CACHE_SECONDS = 5.0
PREFIXES_EVERY_SECONDS = 0.5
_TOKEN = re.compile(r"^wl_([0-9a-f]{8})_([A-Za-z0-9_-]{16,128})$")
PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
OPERATOR_TOKEN_FILE = "operator.token"
SECRET_FILE = "secret"


def token_prefix(token: str) -> str:
    """The prefix of a work-ledger token (`wl_<prefix>_<secret>`), "" if `token` is not one."""
    match = _TOKEN.match(token)
    return "" if match is None else match[1]


class Role(StrEnum):
    AGENT = "agent"
    HARNESS = "harness"
    TRIAGE = "triage"
    OPERATOR = "operator"
    PROJECTOR = "projector"
    READER = "reader"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for."""

    prefix: str
    role: Role
    principal: str


@dataclass(frozen=True, slots=True)
class TokenInfo:
    prefix: str
    role: Role
    principal: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> TokenInfo:
        return cls(
            row["prefix"], Role(row["role"]), row["principal"], row["created_at"], row["revoked_at"]
        )


def load_secret(secret: str | None, home: Path) -> bytes:
    """The server secret: `WL_SECRET`, else WL_HOME/secret (created 0600 when missing)."""
    if secret:
        return secret.encode()
    path = home / SECRET_FILE
    home.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    for _ in range(50):  # another process may be writing it right now
        value = path.read_text().strip()
        if value:
            return value.encode()
        time.sleep(0.01)
    raise RuntimeError(f"{path} is empty; delete it or set WL_SECRET")


def new_token() -> str:
    """A fresh token, not yet stored anywhere."""
    return f"wl_{secrets.token_hex(4)}_{secrets.token_urlsafe(32)}"


def read_token_file(path: Path) -> str:
    """The token in `path` (WL_OPERATOR_TOKEN_FILE, e.g. a mounted Kubernetes Secret)."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the operator token file {path} (WL_OPERATOR_TOKEN_FILE): "
            f"{exc.strerror or exc}; mount the file readable by this user, or unset the variable"
        ) from None
    if not _TOKEN.match(token):
        raise InvalidInput(
            f"the operator token file {path} (WL_OPERATOR_TOKEN_FILE) holds no work-ledger "
            "token (wl_, 8 hex digits, _, then 16 to 128 of letters, digits, - and _); "
            "write one made by `work-ledger token new` into it"
        )
    return token


async def first_operator_from_file(tokens: TokenStore, path: Path | None) -> bool:
    """Store the token in `path` as the first operator token while the ledger has no live
    token (a fresh deployment needs no `token create` inside its container). True when it
    was stored now; a ledger with tokens ignores the file."""
    if path is None or await tokens.count_live() > 0:
        return False
    return await tokens.create_first(Role.OPERATOR, "operator", read_token_file(path)) is not None


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")


class TokenStore:
    """Tokens in the database, verified against an HMAC with a short in-process cache."""

    def __init__(self, store: Store, secret: bytes, *, cache_seconds: float = CACHE_SECONDS):
        self.store = store
        self._secret = secret
        self._cache_seconds = cache_seconds
        self._cache: dict[bytes, tuple[Principal, float]] = {}
        self._prefixes = KnownPrefixes(store)

    def digest(self, token: str) -> bytes:
        # hmac.digest: OpenSSL's one-shot HMAC, without an HMAC object per request.
        return hmac.digest(self._secret, token.encode(), "sha256")

    def _new(
        self, role: Role | str, principal: str, token: str | None = None
    ) -> tuple[str, tuple[str, bytes, str, str]]:
        """A token (a fresh one unless given) and the row that stores it (prefix, HMAC,
        role, principal)."""
        try:
            role = Role(role)
        except ValueError:
            raise InvalidInput(
                f"role {role!r} is not one of {', '.join(r.value for r in Role)}"
            ) from None
        if not PRINCIPAL.match(principal):
            raise InvalidInput(
                f"principal {principal!r} must be 1..128 of letters, digits and . _ : @ -, "
                "starting with a letter or digit (no '/': sub-agents are named per request)"
            )
        token = token or new_token()
        match = _TOKEN.match(token)
        if match is None:
            raise InvalidInput(
                "the token is not a work-ledger token: wl_, 8 hex digits, _, then 16 to 128 "
                "of letters, digits, - and _ (`work-ledger token new` prints one)"
            )
        return token, (match[1], self.digest(token), role.value, principal)

    async def create(self, role: Role | str, principal: str) -> tuple[str, TokenInfo]:
        """Mint a token; the plain token is returned here and never again."""
        token, row_values = self._new(role, principal)
        row = await self.store.fetchrow("insert_token", *row_values)
        assert row is not None
        return token, TokenInfo.from_record(row)

    async def create_first(
        self, role: Role | str, principal: str, token: str | None = None
    ) -> tuple[str, TokenInfo] | None:
        """Mint a token (or store the one given) only if no live token exists, else None.
        Serialized in the database, so of replicas started together on an empty ledger
        exactly one mints."""
        token, row_values = self._new(role, principal, token)
        async with translated_errors(), self.store.pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["lock_first_token"])
            row = await conn.fetchrow(QUERIES["insert_first_token"], *row_values)
        return None if row is None else (token, TokenInfo.from_record(row))

    async def list(self) -> list[TokenInfo]:
        return [TokenInfo.from_record(r) for r in await self.store.fetch("list_tokens")]

    async def revoke(self, prefix: str) -> TokenInfo | None:
        row = await self.store.fetchrow("revoke_token", prefix)
        self._cache.clear()
        return None if row is None else TokenInfo.from_record(row)

    async def count_live(self) -> int:
        row = await self.store.fetchrow("count_live_tokens")
        return 0 if row is None else int(row["live"])

    async def verify(self, token: str) -> Principal:
        """The principal of a live token, or Unauthorized."""
        match = _TOKEN.match(token)
        if match is None:
            raise Unauthorized(
                "the bearer token is not a work-ledger token (wl_<prefix>_<secret>); "
                "send `Authorization: Bearer <token>` with a token from `work-ledger token create`"
            )
        found = self.cached(token)
        if found is not None:
            return found
        if not await self._prefixes.known(match[1]):
            raise Unauthorized(
                "unknown token; ask an operator for one (`work-ledger token create`)"
            )
        digest = self.digest(token)
        row = await self.store.fetchrow("token_by_prefix", match[1])
        if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
            raise Unauthorized(
                "unknown token; ask an operator for one (`work-ledger token create`)"
            )
        if row["revoked_at"] is not None:
            raise Unauthorized(f"token wl_{match[1]}_… was revoked; ask an operator for a new one")
        found = Principal(row["prefix"], Role(row["role"]), row["principal"])
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (found, time.monotonic() + self._cache_seconds)
        return found

    def cached(self, token: str) -> Principal | None:
        """The principal of a token verified in the last `CACHE_SECONDS`, with no I/O."""
        hit = self._cache.get(self.digest(token))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None


class KnownPrefixes:
    """The prefixes of every token minted, so that an unknown one costs no lookup.

    A prefix not in the set makes the set reload, but a reload starts at most every
    `PREFIXES_EVERY_SECONDS` and is shared by every request waiting on it: 2,000 wrong
    tokens cost a few reloads, not 2,000 lookups. A request only trusts a reload that
    began after it arrived, so a token minted (by any process) before it was sent is
    always found."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._prefixes: frozenset[str] = frozenset()
        self._loaded_from = -1.0  # when the query behind `_prefixes` began
        self._reload: asyncio.Task[None] | None = None

    async def known(self, prefix: str) -> bool:
        if prefix in self._prefixes:
            return True
        arrived = time.monotonic()
        while self._loaded_from < arrived:
            if self._reload is None:
                self._reload = asyncio.create_task(self._load())
            await asyncio.shield(self._reload)
        return prefix in self._prefixes

    async def _load(self) -> None:
        try:
            await asyncio.sleep(self._loaded_from + PREFIXES_EVERY_SECONDS - time.monotonic())
            began = time.monotonic()
            rows = await self.store.fetch("token_prefixes")
            self._prefixes = frozenset(row["prefix"] for row in rows)
            self._loaded_from = began
        finally:
            self._reload = None
