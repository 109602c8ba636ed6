"""Settings from WL_* environment variables (and a `.env` file in the working directory)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from dotenv import load_dotenv

DEFAULT_PORT = 4001
# Database connections `serve` uses for requests (it holds one more, to listen). On two
# cores four kept PostgreSQL busiest; more only contend for the same rows at the head of
# the queue (bench/RESULTS.md, E3). A larger database server may want more.
# asyncpg's pool gives a connection back one event-loop turn after its statement (its
# release runs as a task), so at 64 clients 4 connections idled between statements:
# 8 measured ~0.86x of the old pool's throughput where 4 gave 0.55-0.76x
# (bench/results/ab-path-20261201.md).
DEFAULT_POOL_SIZE = 8
# A hung server or network must turn into an error the caller can act on (503), not a
# request that never answers. Every ledger statement is an index lookup or a short scan.
DEFAULT_STATEMENT_TIMEOUT = 30.0
# How long a migration waits for its lock before failing with the name of what holds it:
# a transaction left open must not hang a replica's start-up without a word.
DEFAULT_MIGRATE_LOCK_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str | None
    home: Path
    lease_seconds: int
    stall_seconds: int | None  # None: WL_STALL_SECONDS unset, the stored value stands
    evidence_allowed_prefixes: tuple[str, ...]
    url: str
    token: str | None
    secret: str | None
    pool_size: int = DEFAULT_POOL_SIZE
    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT  # seconds
    # A hot standby for the read side (report, /metrics' views); None: the primary.
    read_database_url: str | None = None
    metrics_token: bool = False  # GET /metrics takes a token (any role) when set
    docs: bool = False  # serve /docs (Swagger UI, loaded from a CDN) when set
    max_attempts: int = 5  # a unit's attempt limit when its registration names none
    # Set when database_url goes through a transaction pooler (PgBouncer): the URL that
    # reaches PostgreSQL itself, for LISTEN and migrations. database_url is then used
    # without session state (no named prepared statements).
    direct_database_url: str | None = None
    migrate_lock_timeout: float = DEFAULT_MIGRATE_LOCK_TIMEOUT  # seconds
    # The embedded server's WAL, streamed here (another disk) before a commit is acknowledged.
    wal_mirror: Path | None = None
    # WL_OPERATOR_TOKEN_FILE: the first operator token, from a file (a Kubernetes Secret).
    operator_token_file: Path | None = None


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {raw!r}") from None


def _optional_int(name: str) -> int | None:
    return _int(name, 0) if os.environ.get(name, "").strip() else None


def _positive(name: str, default: int) -> int:
    value = _int(name, default)
    if value < 1:
        raise SystemExit(f"{name} must be at least 1, not {value}")
    return value


def _positive_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number of seconds, not {raw!r}") from None
    if not 0 < value < float("inf"):
        raise SystemExit(f"{name} must be a positive number of seconds, not {raw!r}")
    return value


def load_settings() -> Settings:
    # Only the working directory's own .env: python-dotenv's default search walks up from
    # the package's folder, so a checkout under /tmp would read a /tmp/.env anyone can plant.
    load_dotenv(Path.cwd() / ".env", override=False)
    prefixes = os.environ.get("WL_EVIDENCE_ALLOWED_PREFIXES", "")
    home = os.environ.get("WL_HOME") or platformdirs.user_data_dir("work-ledger")
    return Settings(
        database_url=os.environ.get("WL_DATABASE_URL") or None,
        home=Path(home).expanduser(),
        lease_seconds=_int("WL_LEASE_SECONDS", 900),
        stall_seconds=_optional_int("WL_STALL_SECONDS"),
        evidence_allowed_prefixes=tuple(p.strip() for p in prefixes.split(",") if p.strip()),
        url=os.environ.get("WL_URL") or f"http://127.0.0.1:{DEFAULT_PORT}",
        token=os.environ.get("WL_TOKEN") or None,
        secret=os.environ.get("WL_SECRET") or None,
        pool_size=_positive("WL_POOL_SIZE", DEFAULT_POOL_SIZE),
        read_database_url=os.environ.get("WL_READ_DATABASE_URL") or None,
        metrics_token=_flag("WL_METRICS_TOKEN"),
        docs=_flag("WL_DOCS"),
        wal_mirror=Path(os.environ["WL_WAL_MIRROR"]).expanduser()
        if os.environ.get("WL_WAL_MIRROR")
        else None,
        statement_timeout=_positive_seconds("WL_STATEMENT_TIMEOUT", DEFAULT_STATEMENT_TIMEOUT),
        max_attempts=_max_attempts(),
        direct_database_url=os.environ.get("WL_DIRECT_DATABASE_URL") or None,
        operator_token_file=Path(os.environ["WL_OPERATOR_TOKEN_FILE"]).expanduser()
        if os.environ.get("WL_OPERATOR_TOKEN_FILE")
        else None,
        migrate_lock_timeout=_positive_seconds(
            "WL_MIGRATE_LOCK_TIMEOUT", DEFAULT_MIGRATE_LOCK_TIMEOUT
        ),
    )


def _max_attempts() -> int:
    value = _int("WL_MAX_ATTEMPTS", 5)
    if not 1 <= value <= 100:
        raise SystemExit(f"WL_MAX_ATTEMPTS must be between 1 and 100, not {value}")
    return value
