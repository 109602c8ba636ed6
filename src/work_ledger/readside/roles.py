"""The reader role: a PostgreSQL LOGIN role that may SELECT the views and nothing else
(`work-ledger grant-reader`), its password sent only as a SCRAM-SHA-256 verifier."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import unicodedata

import asyncpg

from work_ledger.db.queries import QUERIES
from work_ledger.errors import Forbidden, InvalidInput, Unavailable

# The views a reader role may SELECT, in the order wl_grant_reader (migrations 0004, 0007,
# 0011, 0013, 0017, 0022) grants them.
READ_VIEWS = (
    "v_queue_depth",
    "v_stall_list",
    "v_cost_per_unit",
    "v_rework",
    "v_disposition_summary",
    "v_question_wait",
    "v_waiting",
    "v_budget",
    "v_cost_by_model",
    "v_stall_counts",
    "v_costliest_units",
    "v_most_attempted_units",
    "v_changed_units",
    "v_open_questions",
    "v_held_back",
    "v_controls",
    "v_daily",
    "v_forecast",
)
SCRAM_ITERATIONS = 4096
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


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
