"""Named SQL statements, loaded from `sql/*.sql` files.

Each statement sits under a `-- name: <name>` header line; everything up to the next
header is its text. SQL lives only there, readable as SQL.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_named_sql(text: str) -> dict[str, str]:
    parts = _HEADER.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in named:
            raise RuntimeError(f"SQL statement {name!r} is defined twice")
        named[name] = body.strip().rstrip(";")
    return named


def load_queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in (resources.files("work_ledger.db") / "sql").iterdir():
        if entry.name.endswith(".sql"):
            for name, body in parse_named_sql(entry.read_text(encoding="utf-8")).items():
                if name in queries:
                    raise RuntimeError(f"SQL statement {name!r} is defined twice")
                queries[name] = body
    return queries


QUERIES = load_queries()
