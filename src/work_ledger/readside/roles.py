"""The read side (DESIGN §8): the views, the stall threshold they read, and the role
that may read them and nothing else.

Humans read the ledger through the views (migration 0004): Grafana through a read-only
PostgreSQL role, an operator through `work-ledger report`, Prometheus through /metrics.
Everything here reads views, never tables, so it shows what those readers see.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg import Pool

from work_ledger.config import Settings
from work_ledger.db.connect import SERVER_SETTINGS, connect, create_pool, resolve_database_url
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors
from work_ledger.errors import Forbidden, InvalidInput, Unavailable

# The views a reader role may SELECT; wl_grant_reader (migrations 0004, 0007) grants the same.
READ_VIEWS = (
    "v_queue_depth",
    "v_stall_list",
    "v_cost_per_unit",
    "v_rework",
    "v_disposition_summary",
    "v_question_wait",
)
STATES = ("ready", "claimed", "in_progress", "blocked", "verified", "done", "abandoned")
SCRAM_ITERATIONS = 4096
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Anything with fetch/fetchrow/execute: a pool or a connection.
Conn = Pool | asyncpg.Connection


@asynccontextmanager
async def _reading() -> AsyncIterator[None]:
    """Ledger errors for the ways a read of the views fails."""
    try:
        async with translated_errors():
            yield
    except asyncpg.UndefinedTableError as exc:
        raise Unavailable(
            f"the read-side views are missing ({exc}); run `work-ledger migrate` on this "
            "database, then read again"
        ) from exc
    except asyncpg.InsufficientPrivilegeError as exc:
        raise Forbidden(
            f"this database role may not read the views ({exc}); connect as the ledger's "
            "owner, or as a role made by `work-ledger grant-reader`"
        ) from exc


# -- where the read side reads -----------------------------------------------------------

# A read-side connection to a standby refuses any write, should one ever be sent.
READ_ONLY = {**SERVER_SETTINGS, "default_transaction_read_only": "on"}


async def connect_reader(settings: Settings) -> asyncpg.Connection:
    """A connection for the views: to WL_READ_DATABASE_URL (a hot standby) when set, so
    reports never load the primary; otherwise to the ledger's database."""
    if settings.read_database_url is None:
        return await connect(await resolve_database_url(settings))
    async with translated_errors():
        return await connect(settings.read_database_url, server_settings=READ_ONLY)


@asynccontextmanager
async def read_pool(settings: Settings, primary: Pool) -> AsyncIterator[Pool]:
    """The pool /metrics reads its views from: a small read-only one on
    WL_READ_DATABASE_URL when set, else `primary`. Opened lazily, so a standby that is
    down at start delays no write."""
    if settings.read_database_url is None:
        yield primary
        return
    pool = await create_pool(
        settings.read_database_url, min_size=0, max_size=2, server_settings=READ_ONLY
    )
    try:
        yield pool
    finally:
        await pool.close()


async def store_settings(conn: Conn, *, stall_seconds: int) -> None:
    """Write WL_STALL_SECONDS where v_stall_list reads it (at start, by the server)."""
    if not 1 <= stall_seconds <= 604800:
        raise InvalidInput(
            f"WL_STALL_SECONDS must be 1..604800 seconds (a week), not {stall_seconds}"
        )
    async with _reading():
        await conn.execute(QUERIES["read_store_settings"], stall_seconds)


# -- the report -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Report:
    """What `work-ledger report` shows: rows of the views, as read in one moment."""

    domain: str | None
    queue_depth: list[dict[str, Any]]
    stalls: list[dict[str, Any]]
    costs: list[dict[str, Any]]
    costliest: list[dict[str, Any]]
    rework: list[dict[str, Any]]
    reworked: list[dict[str, Any]]
    dispositions: list[dict[str, Any]]
    question_wait: list[dict[str, Any]]


async def read_report(
    conn: asyncpg.Connection, *, domain: str | None = None, top: int = 10
) -> Report:
    """Read every view in one repeatable-read snapshot, so the tables agree with each other."""

    async def rows(name: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in await conn.fetch(QUERIES[name], domain, *args)]

    async with _reading(), conn.transaction(isolation="repeatable_read", readonly=True):
        return Report(
            domain=domain,
            queue_depth=await rows("read_queue_depth"),
            stalls=await rows("read_stall_list"),
            costs=await rows("read_cost_summary"),
            costliest=await rows("read_costliest_units", top),
            rework=await rows("read_rework_rates"),
            reworked=await rows("read_reworked_units", top),
            dispositions=await rows("read_disposition_summary"),
            question_wait=await rows("read_question_wait"),
        )


# -- the gauges of /metrics --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GaugeSnapshot:
    """From one query: units by (domain, state), and by domain the stalled units, the
    attempts ever started (one per claim) and the attempts lost to a stale reclaim; by
    assignee group the open questions and the oldest open one's age in seconds."""

    units: dict[tuple[str, str], int]
    stalled: dict[str, int]
    claims: dict[str, int]
    reclaims: dict[str, int]
    open_questions: dict[str, int]
    oldest_question_seconds: dict[str, int]

    @property
    def domains(self) -> set[str]:
        return {domain for domain, _ in self.units}


def _json(value: Any) -> Any:
    # A pool from work_ledger.db.connect decodes jsonb; a bare connection hands back text.
    return json.loads(value) if isinstance(value, str) else value


def _by_domain(value: Any, domains: set[str]) -> dict[str, int]:
    counts = {domain: 0 for domain in domains}
    counts.update({str(k): int(v) for k, v in _json(value).items()})
    return counts


async def read_gauges(conn: Conn) -> GaugeSnapshot:
    async with _reading():
        row = await conn.fetchrow(QUERIES["read_metrics_snapshot"])
    assert row is not None  # a SELECT of scalar subqueries always returns one row
    units = {
        (str(r["domain"]), state): int(r[state])
        for r in _json(row["queue_depth"])
        for state in STATES
    }
    domains = {domain for domain, _ in units}
    waits = _json(row["question_wait"])
    return GaugeSnapshot(
        units,
        _by_domain(row["stalled"], domains),
        _by_domain(row["claims"], domains),
        _by_domain(row["reclaims"], domains),
        {str(w["group"]): int(w["open"]) for w in waits},
        {str(w["group"]): int(w["oldest"]) for w in waits},
    )


# -- the reader role ---------------------------------------------------------------------


def scram_sha256_verifier(
    password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS
) -> str:
    """The verifier PostgreSQL stores for a password (RFC 5802/7677), computed here so the
    password itself never reaches the server or its logs (as psql's \\password does)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    # PostgreSQL applies SASLprep; NFKC is its normalisation step, and ASCII passes as is.
    normalized = unicodedata.normalize("NFKC", password).encode("utf-8")
    salted = hashlib.pbkdf2_hmac("sha256", normalized, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def check_reader_role(role_name: str, password: str) -> None:
    if not _ROLE_NAME.match(role_name) or role_name.startswith("pg_"):
        raise InvalidInput(
            f"role name {role_name!r} must be 1-63 lowercase letters, digits or underscores, "
            "starting with a letter or underscore and not with pg_; e.g. ledger_reader"
        )
    if not 1 <= len(password) <= 1024:
        raise InvalidInput("the reader's password must be 1..1024 characters")


async def grant_reader(conn: asyncpg.Connection, role_name: str, password: str) -> list[str]:
    """Create or update `role_name` as a LOGIN role that may SELECT the views, nothing else."""
    check_reader_role(role_name, password)
    verifier = scram_sha256_verifier(password)
    try:
        views: list[str] = await conn.fetchval(QUERIES["read_grant_reader"], role_name, verifier)
    except asyncpg.InvalidParameterValueError as exc:
        raise InvalidInput(f"{exc}; {exc.hint}", invariant=exc.constraint_name) from exc
    except asyncpg.InsufficientPrivilegeError as exc:
        raise Forbidden(
            f"the ledger's database user may not create or change roles ({exc}); run "
            "grant-reader with WL_DATABASE_URL naming a user that has CREATEROLE"
        ) from exc
    except asyncpg.UndefinedFunctionError as exc:
        raise Unavailable(
            f"this database lacks the read side ({exc}); run `work-ledger migrate` first"
        ) from exc
    return views
