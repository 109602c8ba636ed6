"""What `run`'s command left in WL_RESULT_FILE: its cost records and its evidence link.

Two shapes are read:
- `run`'s own object: `{"cost_cents": 123, "evidence_url": "https://..."}`;
- Claude Code's result, as `claude -p ... --output-format json` prints it
  (`{"type": "result", "total_cost_usd": ..., "modelUsage": {"<model>": {...}}, ...}`): one
  cost record per model, `estimated` (Claude Code's dollars are list-price estimates), its
  tokens by class, cents = ceil(costUSD x 100) in decimal; `total_cost_usd` only when
  `modelUsage` is absent or empty (one record, no model). An error result (`is_error`:
  max turns, an API error) is read the same, since its money was spent, and its error is
  kept for the release's reason. With `--output-format stream-json` the file is JSON
  lines; the last `result` line is read.
The fixtures of tests/cli/fixtures/claude_code/ are real Claude Code output
(scripts/claude_fixtures.py). A bad file or field is reported and left out, never fatal:
the command's work stands.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

from work_ledger.cli.console import err_console
from work_ledger.client import CostRecord

# Claude Code's token classes -> the ledger's.
TOKENS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadInputTokens": "cache_read_tokens",
    "cacheCreationInputTokens": "cache_write_tokens",
}


# How much of Claude Code's error text a release reason carries.
ERROR_CHARS = 500


@dataclass(frozen=True)
class Result:
    costs: list[CostRecord] = field(default_factory=list)
    evidence_url: str | None = None
    error: str | None = None  # Claude Code's, when its result says is_error


def _warn(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def read_result(path: Path) -> Result:
    """The cost records and evidence link of CMD's result file (none if it wrote none)."""
    if not path.is_file():
        return Result()
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = _loads(text or "{}")
    except ValueError as exc:
        data = _last_result_line(text)
        if data is None:
            _warn(f"WL_RESULT_FILE is not JSON ({exc}); ignoring it")
            return Result()
    if not isinstance(data, dict):
        _warn("WL_RESULT_FILE must hold a JSON object; ignoring it")
        return Result()
    if data.get("type") == "result" and ("modelUsage" in data or "total_cost_usd" in data):
        return Result(claude_costs(data), error=claude_error(data))
    return _own(data)


def _loads(text: str) -> Any:
    # Decimal, not float: 0.07 dollars x 100 is 7.000000000000001 as a float, 8 cents
    # once rounded up.
    return json.loads(text, parse_float=Decimal)


def _last_result_line(text: str) -> dict[str, Any] | None:
    """The last `{"type": "result", ...}` line of JSON lines (stream-json), if any."""
    found = None
    for line in text.splitlines():
        try:
            data = _loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "result":
            found = data
    return found


def claude_error(data: dict[str, Any]) -> str | None:
    """What went wrong, for an error result (`is_error` true): its subtype and errors, or
    its result text (an API error says it there); None for a result that is not one."""
    if data.get("is_error") is not True:
        return None
    subtype = data.get("subtype")
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        detail = "; ".join(str(e) for e in errors)
    else:
        detail = str(data.get("result") or "")
    kind = f"Claude Code {subtype}" if subtype and subtype != "success" else "Claude Code"
    return (f"{kind}: {detail}" if detail else kind)[:ERROR_CHARS]


def _own(data: dict[str, Any]) -> Result:
    cost, evidence = data.get("cost_cents"), data.get("evidence_url")
    if cost is not None and not _count(cost):
        _warn(f"cost_cents must be a whole number of cents, not {cost!r}; ignored")
        cost = None
    if evidence is not None and not isinstance(evidence, str):
        _warn("evidence_url must be a string link; ignored")
        evidence = None
    return Result([CostRecord(cost)] if cost else [], evidence or None)


def claude_costs(data: dict[str, Any]) -> list[CostRecord]:
    """Claude Code's result as cost records: one per model of `modelUsage`, else one of
    `total_cost_usd`. Empty entries (no cents, no tokens) are left out: the ledger refuses
    them."""
    usage = data.get("modelUsage")
    if isinstance(usage, dict) and usage:
        records = [_model_record(str(model), entry) for model, entry in usage.items()]
    else:
        total = _cents(data.get("total_cost_usd"), "total_cost_usd")
        records = [] if total is None else [CostRecord(total, estimated=True)]
    return [r for r in records if r is not None and not r.empty]


def _model_record(model: str, entry: Any) -> CostRecord | None:
    if not isinstance(entry, dict):
        _warn(f"modelUsage[{model!r}] is not an object; ignored")
        return None
    tokens: dict[str, int] = {}
    for theirs, ours in TOKENS.items():
        value = entry.get(theirs)
        if value is None:
            continue
        if not _count(value):
            _warn(f"modelUsage[{model!r}].{theirs} is not a whole number >= 0; ignored")
            continue
        tokens[ours] = value
    cents = _cents(entry.get("costUSD"), f"modelUsage[{model!r}].costUSD")
    # The session's totals: telemetry may already have recorded part of them (§13).
    return CostRecord(
        cents or 0, model=model[:128], estimated=True, includes_telemetry=True, **tokens
    )


def _cents(usd: Any, name: str) -> int | None:
    """Whole cents, rounded up, of a dollar amount: a JSON number read as Decimal (a float,
    from a caller, by its shortest text, so 0.07 stays 0.07)."""
    if usd is None:
        return None
    number = isinstance(usd, Decimal | int | float) and not isinstance(usd, bool)
    if not number or not math.isfinite(usd) or usd < 0:
        _warn(f"{name} must be a dollar amount >= 0, not {usd!r}; ignored")
        return None
    dollars = Decimal(repr(usd)) if isinstance(usd, float) else Decimal(usd)
    return int((dollars * 100).to_integral_value(rounding=ROUND_CEILING))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
