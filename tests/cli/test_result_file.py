"""`run`'s WL_RESULT_FILE: its own object, and Claude Code's `--output-format json` result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from work_ledger.cli.result_file import claude_costs, read_result
from work_ledger.client import CostRecord

CLAUDE_RESULT = Path(__file__).parent / "fixtures" / "claude_result.json"


def test_claude_result_is_one_estimated_record_per_model(tmp_path: Path) -> None:
    """The fixture, as `claude -p ... --output-format json` writes it: each model of
    modelUsage is one record with its four token classes, cents rounded up, estimated."""
    path = tmp_path / "result.json"
    shutil.copy(CLAUDE_RESULT, path)
    expected = [
        CostRecord(18, "claude-sonnet-4-5-20250929", 31, 3120, 210455, 18234, estimated=True),
        CostRecord(1, "claude-haiku-4-5-20251001", 1843, 412, 0, 0, estimated=True),
    ]
    assert read_result(path).costs == expected
    assert read_result(path).evidence_url is None


def test_total_cost_is_used_only_without_model_usage() -> None:
    """No modelUsage: one record of total_cost_usd, no model; with it, the total is unused."""
    without = {"type": "result", "total_cost_usd": 0.0079825, "usage": {"input_tokens": 3}}
    assert claude_costs(without) == [CostRecord(1, None, estimated=True)]
    both = {
        "type": "result",
        "total_cost_usd": 9.99,
        "modelUsage": {"m": {"inputTokens": 5, "costUSD": 0.01}},
    }
    assert claude_costs(both) == [CostRecord(1, "m", input_tokens=5, estimated=True)]


def test_cents_round_up_in_decimal_not_float(tmp_path: Path) -> None:
    """0.07 dollars is 7 cents (as a float, 0.07 x 100 is 7.000000000000001, which would
    round up to 8); 0.071 is 8 cents."""
    path = tmp_path / "result.json"
    usage = {"a": {"costUSD": 0.07}, "b": {"costUSD": 0.071}}
    path.write_text(json.dumps({"type": "result", "modelUsage": usage}))
    assert [(r.model, r.cost_cents) for r in read_result(path).costs] == [("a", 7), ("b", 8)]


def test_empty_and_bad_model_entries_are_left_out(tmp_path: Path) -> None:
    """An entry with no cents and no tokens (the ledger refuses those) or that is not an
    object is left out; a bad token count is dropped, the rest of the entry kept."""
    usage = {
        "idle": {"inputTokens": 0, "costUSD": 0},
        "odd": "n/a",
        "kept": {"inputTokens": -1, "outputTokens": 4, "costUSD": 0},
    }
    data = {"type": "result", "total_cost_usd": 1, "modelUsage": usage}
    assert claude_costs(data) == [CostRecord(0, "kept", output_tokens=4, estimated=True)]


def test_own_result_object_still_reads(tmp_path: Path) -> None:
    """`{"cost_cents", "evidence_url"}`: one record of cents alone (not estimated)."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"cost_cents": 120, "evidence_url": "https://ci.example/1"}))
    result = read_result(path)
    assert (result.costs, result.evidence_url) == ([CostRecord(120)], "https://ci.example/1")
    assert result.costs[0].to_json() == {"cost_cents": 120}
