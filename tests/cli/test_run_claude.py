"""`run -- claude -p ... --output-format json > "$WL_RESULT_FILE"`: Claude Code's own result
is recorded per model, and the command's OpenTelemetry resource names the attempt."""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

from pathlib import Path

import pytest
from test_run import operator, run, run_server  # noqa: F401  (shared fixtures)

from support.wl_server import LedgerServer
from work_ledger.client import Client, ModelCost

# Real Claude Code output (2.1.197, scripts/claude_fixtures.py; see the folder's README).
FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
OPUS, HAIKU = "claude-opus-4-8[1m]", "claude-haiku-4-5-20251001"


def test_run_records_claude_codes_result_per_model_and_names_the_attempt_to_otel(
    run_server: LedgerServer, operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for `claude -p` writes the real subagent.json to WL_RESULT_FILE: GET
    /units/{unit} shows one estimated entry per model with its tokens, the cents summed;
    OTEL_RESOURCE_ATTRIBUTES gets the unit and the attempt after what it held."""
    operator.register([{"external_ref": "orders/42", "fleet": "f"}])
    seen = tmp_path / "otel.txt"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=claude-code")
    result = FIXTURES / "subagent.json"
    script = f'printf %s "$OTEL_RESOURCE_ATTRIBUTES" > {seen}; cat {result} > "$WL_RESULT_FILE"'
    status, err = run(run_server, tmp_path, "--", "sh", "-c", script)
    assert status == 0, err
    detail = operator.get_unit("orders/42")
    (attempt,) = detail.attempts
    assert (detail.unit.state, detail.unit.cost_cents, attempt.cost_cents) == (
        "in_progress",
        9,
        9,
    )
    assert sorted(attempt.cost_by_model, key=lambda m: m.cost_cents) == [
        ModelCost(HAIKU, 1, 1, 412, 9, 0, 0),
        ModelCost(OPUS, 8, 8, 8, 24, 24576, 10240),
    ]
    expected = f"service.name=claude-code,wl.unit={detail.unit.id},wl.attempt={attempt.id}"
    assert seen.read_text() == expected


def test_run_records_a_claude_error_results_money_and_names_it_in_the_release(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """`claude -p --max-turns 1` ran out of turns (exit status 1, is_error): the money both
    models cost is recorded, and the attempt is released failed, its reason naming Claude
    Code's error."""
    operator.register([{"external_ref": "orders/43", "fleet": "f"}])
    result = FIXTURES / "max_turns.json"
    status, err = run(
        run_server, tmp_path, "--", "sh", "-c", f'cat {result} > "$WL_RESULT_FILE"; exit 1'
    )
    assert status == 1, err
    detail = operator.get_unit("orders/43")
    (attempt,) = detail.attempts
    assert (detail.unit.state, attempt.outcome, attempt.cost_cents) == ("ready", "failed", 5)
    assert sorted((m.model, m.cost_cents, m.input_tokens) for m in attempt.cost_by_model) == [
        (HAIKU, 1, 412),
        (OPUS, 4, 4),
    ]
    expected = (
        "command exited with status 1 "
        "(Claude Code error_max_turns: Reached maximum number of turns (1))"
    )
    (released,) = [e for e in operator.iter_events("orders/43") if e.event_type == "released"]
    assert released.detail["reason"] == expected


def test_run_sets_otel_attributes_when_none_were_set(
    run_server: LedgerServer, operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without OTEL_RESOURCE_ATTRIBUTES, the command gets the unit and the attempt alone."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    seen = tmp_path / "otel.txt"
    status, err = run(
        run_server, tmp_path, "--", "sh", "-c", f'printf %s "$OTEL_RESOURCE_ATTRIBUTES" > {seen}'
    )
    assert status == 0, err
    detail = operator.get_unit("u1")
    assert seen.read_text() == f"wl.unit={detail.unit.id},wl.attempt={detail.attempts[0].id}"
