"""Claude Code's `claude_code.api_request` telemetry events as cost (DESIGN §13).

Pure: the OTLP decoding is the API's (api/otlp.py, with the OpenTelemetry project's own
messages); this reads one log record's body and attributes, already plain Python values,
and says whether it is an api_request that counts, and for which attempt.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

API_REQUEST = "claude_code.api_request"
ATTEMPT_ATTRIBUTE = "wl.attempt_id"
# The attributes Claude Code names its four token classes by, and ours.
TOKENS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_tokens",
    "cache_creation_tokens": "cache_write_tokens",
}
MAX_MODEL = 128
MAX_KEY = 300
# A result's `claude-opus-4-8[1m]` (the 1M-token context) is telemetry's `claude-opus-4-8`.
_BRACKETED = re.compile(r"\s*\[[^\[\]]*\]\s*$")

Value = str | int | float | bool | None


def plain_model(model: str) -> str:
    """The model's name without a bracketed suffix, as telemetry names it."""
    return _BRACKETED.sub("", model).strip()[:MAX_MODEL] or model[:MAX_MODEL]


@dataclass(frozen=True, slots=True)
class TelemetryRecord:
    """One API call's spend, for one attempt, once per `key`."""

    attempt_id: uuid.UUID
    key: str
    model: str
    cost_usd: Decimal
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class Dropped(ValueError):
    """An api_request record that cannot count: why (kept for the partialSuccess message)."""


def is_api_request(body: Value, attributes: Mapping[str, Value]) -> bool:
    """Claude Code names the event in the record's body, and as `event.name`."""
    return body == API_REQUEST or attributes.get("event.name") in ("api_request", API_REQUEST)


def api_request(attributes: Mapping[str, Value], resource: Mapping[str, Value]) -> TelemetryRecord:
    """The spend of one api_request record; Dropped when it names no attempt, no identity
    or no usable figures. Numbers may come as numbers or as strings."""
    attempt = attributes.get(ATTEMPT_ATTRIBUTE, resource.get(ATTEMPT_ATTRIBUTE))
    try:
        attempt_id = uuid.UUID(str(attempt))
    except ValueError:
        raise Dropped(f"{ATTEMPT_ATTRIBUTE} is {attempt!r}, not an attempt id") from None
    model = attributes.get("model")
    if not isinstance(model, str) or not model.strip():
        raise Dropped("the record has no model")
    tokens = {ours: _count(attributes.get(theirs), theirs) for theirs, ours in TOKENS.items()}
    return TelemetryRecord(
        attempt_id,
        _identity(attributes),
        plain_model(model.strip()),
        _dollars(attributes.get("cost_usd")),
        **tokens,
    )


def _identity(attributes: Mapping[str, Value]) -> str:
    """session.id and event.sequence (which counts every event of a session), else the
    API's request_id: the same record replayed has the same identity."""
    session, sequence = attributes.get("session.id"), attributes.get("event.sequence")
    if session not in (None, "") and sequence not in (None, ""):
        return f"session:{session}#{_count(sequence, 'event.sequence')}"[:MAX_KEY]
    request = attributes.get("request_id")
    if request not in (None, ""):
        return f"request:{request}"[:MAX_KEY]
    raise Dropped("the record has neither session.id with event.sequence nor request_id")


def _dollars(value: Value) -> Decimal:
    """cost_usd in decimal: a float by its shortest text, so 0.038464 stays 0.038464."""
    if isinstance(value, bool) or value is None:
        raise Dropped(f"cost_usd is {value!r}, not a dollar amount")
    try:
        dollars = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        raise Dropped(f"cost_usd is {value!r}, not a dollar amount") from None
    if not dollars.is_finite() or dollars < 0 or dollars > 10**9:
        raise Dropped(f"cost_usd is {value!r}, not a dollar amount 0..1e9")
    return dollars


def _count(value: Value, name: str) -> int:
    """A whole number >= 0 (absent: 0), sent as a number or a string."""
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise Dropped(f"{name} is {value!r}, not a whole number >= 0")
    return value
