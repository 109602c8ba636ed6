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
# The result names `claude-opus-4-8[1m]`; the ledger keeps telemetry's name for it (§13).
OPUS, HAIKU = "claude-opus-4-8", "claude-haiku-4-5-20251001"


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
    expected = f"service.name=claude-code,wl.unit_id={detail.unit.id},wl.attempt_id={attempt.id}"
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
    ours = f"wl.unit_id={detail.unit.id},wl.attempt_id={detail.attempts[0].id}"
    assert seen.read_text() == ours


# What the stand-in command does in place of Claude Code: export the captured telemetry batch
# (scripts/claude_otlp_fixtures.py) to where `run` pointed the logs exporter, with its
# header, naming the attempt `run` gave it, as the real one does.
EXPORT = """
import os, sys, urllib.request
body = open(sys.argv[1], "rb").read().replace(
    b"0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b", os.environ["WL_ATTEMPT_ID"].encode())
name, _, value = os.environ["OTEL_EXPORTER_OTLP_LOGS_HEADERS"].partition("=")
request = urllib.request.Request(
    os.environ["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"], data=body, method="POST",
    headers={name: value, "Content-Type": "application/x-protobuf"})
assert urllib.request.urlopen(request).status == 200
"""
OTLP = Path(__file__).parent / "fixtures" / "claude_otlp"


@pytest.mark.parametrize("telemetry", [True, False])
def test_run_records_the_result_only_above_telemetry(
    run_server: LedgerServer,
    operator: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    telemetry: bool,
) -> None:
    """The command exports its telemetry (9 cents over 3 calls) then writes the same
    session's result: the attempt costs 9 cents, not 18; without telemetry (WL_RUN_TELEMETRY=0
    leaves the exporter unset) the result alone records the same 9."""
    import shlex
    import sys

    operator.register([{"external_ref": "orders/44", "fleet": "f"}])
    monkeypatch.setenv("WL_RUN_TELEMETRY", "1" if telemetry else "0")
    export = tmp_path / "export.py"
    export.write_text(EXPORT)
    body, result = OTLP / "http-protobuf-1.body", OTLP / "http-protobuf-result.json"
    python = shlex.quote(sys.executable)
    script = f'cat {result} > "$WL_RESULT_FILE"'
    if telemetry:
        script = f"{python} {export} {body} && {script}"
    else:
        script = f'test -z "$OTEL_EXPORTER_OTLP_LOGS_ENDPOINT" && {script}'
    status, err = run(run_server, tmp_path, "--", "sh", "-c", script)
    assert status == 0, err
    (attempt,) = operator.get_unit("orders/44").attempts
    assert attempt.cost_cents == 9
    assert sorted(attempt.cost_by_model, key=lambda m: m.cost_cents) == [
        ModelCost(HAIKU, 1, 1, 412, 9, 0, 0),
        ModelCost(OPUS, 8, 8, 8, 24, 24576, 10240),
    ]
    records = [e for e in operator.iter_events("orders/44") if e.event_type == "cost_recorded"]
    sources = {e.detail.get("source") for e in records}
    assert sources == ({"telemetry"} if telemetry else {"result"})


def test_run_points_the_logs_exporter_at_the_ledger(
    run_server: LedgerServer, operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's environment turns Claude Code's telemetry on, at $WL_URL/otlp/v1/logs
    with the agent's token; an export interval already set is kept."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    monkeypatch.setenv("OTEL_LOGS_EXPORT_INTERVAL", "2000")
    seen = tmp_path / "env.txt"
    status, err = run(run_server, tmp_path, "--", "sh", "-c", f"env > {seen}")
    assert status == 0, err
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["CLAUDE_CODE_ENABLE_TELEMETRY"] == "1"
    assert env["OTEL_LOGS_EXPORTER"] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] == f"{run_server.url}/otlp/v1/logs"
    assert env["OTEL_EXPORTER_OTLP_LOGS_HEADERS"] == f"Authorization=Bearer {env['WL_TOKEN']}"
    assert env["OTEL_LOGS_EXPORT_INTERVAL"] == "2000"
