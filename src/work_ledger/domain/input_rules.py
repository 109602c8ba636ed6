"""The bounds every caller's input is held to before the ledger touches the database.

The service applies them for every caller (HTTP, CLI, MCP, Temporal ingest); the HTTP
schemas repeat the numbers so that the OpenAPI document shows them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from work_ledger.errors import InvalidInput

MAX_BATCH = 1000
MAX_LEASE_SECONDS = 86400
MAX_EVIDENCE_URL = 2048


def lease(lease_seconds: int | None, default: int) -> int:
    """The lease to grant: the one asked for, or `default`, within 1..MAX_LEASE_SECONDS."""
    granted = default if lease_seconds is None else lease_seconds
    if not 1 <= granted <= MAX_LEASE_SECONDS:
        raise InvalidInput(f"lease_seconds must be 1..{MAX_LEASE_SECONDS}, not {granted}")
    return granted


def check_evidence(url: str, allowed_prefixes: tuple[str, ...]) -> None:
    """Evidence is a bounded http(s) link, inside `allowed_prefixes` if any are set."""
    if (
        not url.startswith(("http://", "https://"))
        or len(url) > MAX_EVIDENCE_URL
        or any(c.isspace() for c in url)
        or len(url.split("/")[2]) == 0
    ):
        raise InvalidInput(
            f"evidence_url must be an http(s) link of at most {MAX_EVIDENCE_URL} characters "
            "to where the evidence lives, never the evidence itself",
            invariant="unit_evidence_is_link",
        )
    if allowed_prefixes and not url.startswith(allowed_prefixes):
        raise InvalidInput(
            f"evidence_url {url[:200]!r} is outside the allowed evidence locations "
            f"({', '.join(allowed_prefixes)}); upload the evidence there and link to it",
            invariant="evidence_prefix_allowed",
        )


MAX_EXCLUSIVE_KEYS = 20
MAX_EXCLUSIVE_KEY = 200


def exclusive_json(keys: Sequence[str], *, where: str) -> str:
    """A unit's exclusion keys as its statement takes them: a JSON array ([] for none).
    At most MAX_EXCLUSIVE_KEYS strings of 1..MAX_EXCLUSIVE_KEY characters (DESIGN §13)."""
    if isinstance(keys, str) or len(keys) > MAX_EXCLUSIVE_KEYS:
        raise InvalidInput(
            f"{where}: exclusive takes a list of at most {MAX_EXCLUSIVE_KEYS} keys; "
            "send fewer (a module, a path prefix, a table)",
            invariant="unit_exclusive_keys_bounded",
        )
    for key in keys:
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_EXCLUSIVE_KEY:
            raise InvalidInput(
                f"{where}: each exclusive key is a string of 1..{MAX_EXCLUSIVE_KEY} "
                f"characters, not {str(key)[:60]!r}",
                invariant="unit_exclusive_keys_bounded",
            )
    return json.dumps(sorted(set(keys)))
