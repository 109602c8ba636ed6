"""`run`'s WL_RESULT_FILE: its own object, and Claude Code's `--output-format json` result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from work_ledger.cli.result_file import Result, claude_costs, read_result
from work_ledger.client import CostRecord

# Real Claude Code output (2.1.197, scripts/claude_fixtures.py; see the folder's README).
FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
OPUS, HAIKU = "claude-opus-4-8[1m]", "claude-haiku-4-5-20251001"
# subagent.json: the main model, then the haiku subagent it delegated to.
TWO_MODELS = [
    CostRecord(8, OPUS, 8, 24, 24576, 10240, estimated=True, includes_telemetry=True),
    CostRecord(1, HAIKU, 412, 9, 0, 0, estimated=True, includes_telemetry=True),
]


def fixture(name: str, tmp_path: Path) -> Path:
    path = tmp_path / "result.json"
    shutil.copy(FIXTURES / name, path)
    return path


def test_claude_result_is_one_estimated_record_of_its_model(tmp_path: Path) -> None:
    """`claude -p "say hi" --output-format json` as written (a trailing newline, the model
    named `claude-opus-4-8[1m]`): one record, its four token classes, cents rounded up
    from costUSD 0.038464, estimated; no evidence, no error."""
    result = read_result(fixture("result.json", tmp_path))
    assert result.costs == [
        CostRecord(4, OPUS, 4, 12, 12288, 5120, estimated=True, includes_telemetry=True)
    ]
    assert (result.evidence_url, result.error) == (None, None)


def test_claude_result_of_two_models_is_one_record_each(tmp_path: Path) -> None:
    """A session that delegated to a haiku subagent: one record per model of modelUsage
    (0.076928 dollars is 8 cents, 0.000457 is 1)."""
    assert read_result(fixture("subagent.json", tmp_path)).costs == TWO_MODELS


def test_claude_error_result_records_its_money_and_names_its_error(tmp_path: Path) -> None:
    """`--max-turns 1` ended the session (is_error, exit status 1) after both models were
    paid for: both records, and the error for the release's reason."""
    result = read_result(fixture("max_turns.json", tmp_path))
    assert result.costs == [
        CostRecord(4, OPUS, 4, 12, 12288, 5120, estimated=True, includes_telemetry=True),
        CostRecord(1, HAIKU, 412, 9, 0, 0, estimated=True, includes_telemetry=True),
    ]
    assert result.error == "Claude Code error_max_turns: Reached maximum number of turns (1)"


def test_claude_api_error_result_records_nothing(tmp_path: Path) -> None:
    """The API refused the first call: modelUsage is {} and total_cost_usd 0, so there is
    nothing to record (the ledger would refuse an empty record); the error is kept."""
    result = read_result(fixture("api_error.json", tmp_path))
    assert result.costs == []
    expected = "Claude Code: API Error: 400 refused by the fake (400 invalid_request_error)"
    assert result.error == expected


def test_claude_stream_json_reads_its_last_result_line(tmp_path: Path) -> None:
    """`--output-format stream-json --verbose` writes nine JSON lines; the last, the
    result, is read (the assistant lines' usage is not counted twice)."""
    path = fixture("stream.jsonl", tmp_path)
    assert len(path.read_text().splitlines()) == 9
    assert read_result(path).costs == TWO_MODELS


def test_json_lines_without_a_result_are_ignored(tmp_path: Path) -> None:
    """JSON lines with no result line (a session cut short) record nothing."""
    path = tmp_path / "result.json"
    lines = (FIXTURES / "stream.jsonl").read_text().splitlines()[:-1]
    path.write_text("\n".join(lines) + "\n")
    assert read_result(path) == Result()


def test_total_cost_is_used_only_without_model_usage() -> None:
    """No modelUsage: one record of total_cost_usd, no model; with it, the total is unused."""
    without = {"type": "result", "total_cost_usd": 0.0079825, "usage": {"input_tokens": 3}}
    assert claude_costs(without) == [CostRecord(1, None, estimated=True)]
    assert claude_costs({**without, "modelUsage": {}}) == [CostRecord(1, None, estimated=True)]
    both = {
        "type": "result",
        "total_cost_usd": 9.99,
        "modelUsage": {"m": {"inputTokens": 5, "costUSD": 0.01}},
    }
    assert claude_costs(both) == [
        CostRecord(1, "m", input_tokens=5, estimated=True, includes_telemetry=True)
    ]


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
    assert claude_costs(data) == [
        CostRecord(0, "kept", output_tokens=4, estimated=True, includes_telemetry=True)
    ]


def test_own_result_object_still_reads(tmp_path: Path) -> None:
    """`{"cost_cents", "evidence_url"}`: one record of cents alone (not estimated)."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"cost_cents": 120, "evidence_url": "https://ci.example/1"}))
    result = read_result(path)
    assert (result.costs, result.evidence_url) == ([CostRecord(120)], "https://ci.example/1")
    assert result.costs[0].to_json() == {"cost_cents": 120}
