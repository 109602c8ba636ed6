"""Parsing the API's JSON into the SDK's frozen dataclasses, tolerantly.

Unknown fields are ignored and missing optional ones default, so an older SDK keeps working
against a newer server. Ids are strings, times are aware datetimes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, TypeVar

T = TypeVar("T")

_TIMES = frozenset(
    {
        "created_at",
        "updated_at",
        "disposed_at",
        "lease_expires_at",
        "last_heartbeat_at",
        "started_at",
        "ended_at",
        "closed_at",
        "occurred_at",
        "paused_since",
    }
)


def parse_time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def build(cls: type[T], data: dict[str, Any]) -> T:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name in _TIMES:
            value = parse_time(value)
        elif f.name.endswith("id") and value is not None and not isinstance(value, int):
            value = str(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def objects(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The objects of a list field; absent, null or not a list: none."""
    value = data.get(name)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def to_json(value: Any) -> Any:
    """Plain JSON-ready data from these records (for `--json` output and MCP replies)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value
