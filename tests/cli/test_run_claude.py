"""`run -- claude -p ... --output-format json > "$WL_RESULT_FILE"`: Claude Code's own result
is recorded per model, and the command's OpenTelemetry resource names the attempt."""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

from pathlib import Path

import pytest
from test_run import operator, run, run_server  # noqa: F401  (shared fixtures)

from support.wl_server import LedgerServer
from work_ledger.client import Client, ModelCost

CLAUDE_RESULT = Path(__file__).parent / "fixtures" / "claude_result.json"


def test_run_records_claude_codes_result_per_model_and_names_the_attempt_to_otel(
    run_server: LedgerServer, operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for `claude -p` writes the fixture to WL_RESULT_FILE: one estimated record
    per model, with its tokens; OTEL_RESOURCE_ATTRIBUTES gets the unit and the attempt
    after what it held."""
    operator.register([{"external_ref": "orders/42", "fleet": "f"}])
    seen = tmp_path / "otel.txt"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=claude-code")
    script = (
        f'printf %s "$OTEL_RESOURCE_ATTRIBUTES" > {seen}; cat {CLAUDE_RESULT} > "$WL_RESULT_FILE"'
    )
    status, err = run(run_server, tmp_path, "--", "sh", "-c", script)
    assert status == 0, err
    detail = operator.get_unit("orders/42")
    (attempt,) = detail.attempts
    assert (detail.unit.state, detail.unit.cost_cents, attempt.cost_cents) == (
        "in_progress",
        19,
        19,
    )
    assert sorted(attempt.cost_by_model, key=lambda m: m.cost_cents) == [
        ModelCost("claude-haiku-4-5-20251001", 1, 1, 1843, 412, 0, 0),
        ModelCost("claude-sonnet-4-5-20250929", 18, 18, 31, 3120, 210455, 18234),
    ]
    expected = f"service.name=claude-code,wl.unit={detail.unit.id},wl.attempt={attempt.id}"
    assert seen.read_text() == expected


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
