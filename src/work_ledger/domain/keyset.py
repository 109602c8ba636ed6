"""Keyset pages: the cursor is the last row's sort key, never an offset."""

from __future__ import annotations

import base64
import datetime as dt
import uuid

from work_ledger.errors import InvalidInput

MAX_PAGE_LIMIT = 500


def check_page_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidInput(
            f"limit must be 1..{MAX_PAGE_LIMIT}, not {limit}; page on with the cursor"
        )


def encode(moment: dt.datetime, row_id: uuid.UUID) -> str:
    raw = f"{moment.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str | None) -> tuple[dt.datetime | None, uuid.UUID | None]:
    if cursor is None:
        return None, None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, row_id = raw.split("|")
        return dt.datetime.fromisoformat(moment), uuid.UUID(row_id)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(
            f"cursor {cursor!r} is not one this ledger issued; drop it to start over"
        ) from None
