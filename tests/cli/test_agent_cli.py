"""The agent and operator CLI verbs against a real running server."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from support.wl_server import LedgerServer, quiet_access_log, settings_for, start
from work_ledger.cli import app

EVIDENCE = "https://ci.example/runs/9"
Cli = Callable[..., Result]


@pytest.fixture
def cli_server(database_url: str, tmp_path: Path) -> Iterator[LedgerServer]:
    with quiet_access_log():
        running = start(settings_for(database_url, tmp_path / "home"))
        yield running
        running.stop()


@pytest.fixture
def cli(cli_server: LedgerServer, tmp_path: Path) -> Cli:
    """Run `work-ledger ARGS` in-process as (role, principal); operator by default."""
    runner = CliRunner()

    def invoke(*args: str, role: str = "operator", principal: str = "op", **env: str) -> Result:
        environment = {
            "WL_URL": cli_server.url,
            "WL_TOKEN": cli_server.token(role, principal),
            "WL_HOME": str(tmp_path / "cli-home"),
            "WL_ATTEMPT_ID": "",
            "WL_UNIT_ID": "",
            **env,
        }
        return runner.invoke(app, list(args), env=environment)

    return invoke


def agent(cli: Cli, *args: str) -> Result:
    return cli(*args, role="agent", principal="agent-1")


def test_register_large_file_twice_is_idempotent(cli: Cli, tmp_path: Path) -> None:
    """10,000 rows: all created the first time, all existing the second."""
    path = tmp_path / "units.csv"
    lines = ["external_ref,fleet,domain"] + [f"legacy/{i},fleet-a,orders" for i in range(10_000)]
    path.write_text("\n".join(lines) + "\n")
    first = cli("register", str(path), "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == {
        "created": 10_000,
        "existing": 0,
        "bad": 0,
        "unconfirmed": 0,
        "bad_rows": [],
    }
    second = cli("register", str(path), "--json")
    assert json.loads(second.stdout)["existing"] == 10_000
    assert json.loads(second.stdout)["created"] == 0


def test_register_reports_bad_rows_by_line(cli: Cli, tmp_path: Path) -> None:
    """Bad rows are named by line; the good ones are registered; exit 1."""
    path = tmp_path / "units.jsonl"
    path.write_text(
        '{"external_ref": "a", "fleet": "f"}\n'
        "{not json\n"
        '{"external_ref": "b"}\n'
        "\n"
        '{"external_ref": "a", "fleet": "f"}\n'
        '{"external_ref": "c", "fleet": "f", "colour": "red"}\n'
        '{"external_ref": "d", "fleet": "f", "domain": "orders"}\n'
    )
    result = cli("register", str(path))
    assert result.exit_code == 1
    assert "2 created, 0 existing, 4 bad row(s)" in result.stdout
    for line, words in [(2, "not valid JSON"), (3, "fleet"), (5, "line 1"), (6, "colour")]:
        assert f"line {line}: " in result.stderr
        assert words in result.stderr.split(f"line {line}: ")[1].splitlines()[0]
    shown = cli("show", "d", "--json")
    assert json.loads(shown.stdout)["unit"]["domain"] == "orders"


def test_register_reports_every_row_when_the_server_refuses_one(cli: Cli, tmp_path: Path) -> None:
    """Rows only the server refuses (a NUL byte) are bad by line, and so is one no client can
    send (a lone surrogate); the other rows of their batches are registered."""
    odd = {3: "\\u0000", 8: "\\u0000", 10: "\\ud800"}
    refs = [f"odd/{i}{odd.get(i, '')}" for i in range(1, 12)]
    path = tmp_path / "units.jsonl"
    path.write_text("".join(f'{{"external_ref": "{ref}", "fleet": "f"}}\n' for ref in refs))
    result = cli("register", str(path), "--batch", "4", "--json")
    assert result.exit_code == 1, (result.output, result.exception)
    report = json.loads(result.stdout)
    assert (report["created"], report["existing"], report["bad"]) == (8, 0, 3)
    assert [row["line"] for row in report["bad_rows"]] == [3, 8, 10]
    errors = [row["error"] for row in report["bad_rows"]]
    assert ["refused by the server" in e for e in errors] == [True, True, False], errors
    assert "UTF-8" in errors[2]
    listed = json.loads(cli("events", "--json", "--limit", "50").stdout)["items"]
    registered = sorted(e["unit_id"] for e in listed if e["event_type"] == "registered")
    assert len(registered) == 8
    again = json.loads(cli("register", str(path), "--batch", "4", "--json").stdout)
    assert (again["created"], again["existing"], again["bad"]) == (0, 8, 3)


def test_register_unreachable_says_which_rows_are_unconfirmed(cli: Cli, tmp_path: Path) -> None:
    """No server: exit 6, and the report counts every row unconfirmed from the first line."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\nu2,f\n")
    result = cli("register", str(path), "--json", WL_URL="http://127.0.0.1:9")
    assert result.exit_code == 6, result.output
    report = json.loads(result.stdout)
    assert (report["unconfirmed"], report["first_unconfirmed_line"]) == (2, 2)


def test_verbs_json_output_parses(cli: Cli, tmp_path: Path) -> None:
    """Every verb's --json output is one JSON document; a unit goes from ready to done."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    assert cli("register", str(path), "--json").exit_code == 0
    claimed = json.loads(agent(cli, "claim", "--json").stdout)
    assert claimed["unit"]["external_ref"] == "u1"
    attempt = claimed["attempt"]["id"]
    steps = [
        ("start", "u1", "--attempt", attempt),
        ("heartbeat", "u1"),
        ("cost", "u1", "75"),
        ("block", "u1", "which currency?"),
    ]
    outputs = [json.loads(agent(cli, *step, "--json").stdout) for step in steps]
    assert [o["unit"]["state"] for o in outputs] == ["in_progress"] * 3 + ["blocked"]
    open_questions = json.loads(cli("questions", "--json").stdout)["items"]
    assert [q["question"] for q in open_questions] == ["which currency?"]
    assert json.loads(cli("answer", "u1", "EUR", "--json").stdout)["question"]["answer"] == "EUR"
    verified = json.loads(agent(cli, "verify", "u1", EVIDENCE, "--json").stdout)
    assert verified["attempt"]["outcome"] == "verified"
    done = json.loads(agent(cli, "dispose", "u1", "MIGRATED", "--json").stdout)
    assert (done["unit"]["state"], done["unit"]["cost_cents"]) == ("done", 75)
    shown = json.loads(cli("show", "u1", "--json").stdout)
    assert [a["outcome"] for a in shown["attempts"]] == ["verified"]
    events = json.loads(cli("events", "u1", "--json", "--limit", "50").stdout)["items"]
    assert events[0]["event_type"] == "disposed"
    assert events[-1]["event_type"] == "registered"


def test_release_verb_gives_unit_back(cli: Cli, tmp_path: Path) -> None:
    """release --outcome failed: the unit is ready again, its attempt failed."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    cli("register", str(path))
    claimed = agent(cli, "claim")
    assert "claimed" in claimed.stdout
    assert "u1" in claimed.stdout
    released = json.loads(agent(cli, "release", "u1", "--outcome", "failed", "--json").stdout)
    assert (released["unit"]["state"], released["attempt"]["outcome"]) == ("ready", "failed")


def test_exit_codes_distinguish_failures(cli: Cli, tmp_path: Path) -> None:
    """3 nothing to claim, 4 refused by an invariant, 5 auth, 6 unreachable, 1 unknown unit."""
    assert agent(cli, "claim").exit_code == 3
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    cli("register", str(path))
    refused = cli("verify", "u1", EVIDENCE)
    assert refused.exit_code == 4
    assert "unit_state_transition_allowed" in refused.stderr
    assert cli("show", "u1", WL_TOKEN="wl_00000000_" + "x" * 40).exit_code == 5
    assert cli("show", "u1", WL_URL="http://127.0.0.1:9").exit_code == 6
    assert cli("show", "no-such-unit").exit_code == 1


def test_refusal_json_error_names_invariant(cli: Cli, tmp_path: Path) -> None:
    """With --json, a refusal is a JSON object on stderr naming the rule and the next steps."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    cli("register", str(path))
    refused = cli("verify", "u1", EVIDENCE, "--json")
    error = json.loads(refused.stderr)
    assert (error["error"], error["invariant"], error["state"]) == (
        "invariant_violation",
        "unit_state_transition_allowed",
        "ready",
    )
    assert "claim" in error["allowed"]


def test_default_token_read_from_home(cli: Cli, cli_server: LedgerServer, tmp_path: Path) -> None:
    """Without WL_TOKEN an operator verb uses WL_HOME/operator.token, as `serve` stores it."""
    home = tmp_path / "serve-home"
    home.mkdir()
    (home / "operator.token").write_text(cli_server.token("operator", "op") + "\n")
    shown = cli("questions", "--json", WL_TOKEN="", WL_HOME=str(home))
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["items"] == []


def test_unit_and_attempt_come_from_the_environment(cli: Cli, tmp_path: Path) -> None:
    """WL_UNIT_ID and WL_ATTEMPT_ID fill UNIT and --attempt when they are not given; given
    arguments are matched in order (one argument to `verify` is UNIT) and options may come
    between them."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    cli("register", str(path))
    claimed = json.loads(agent(cli, "claim", "--json").stdout)
    ids = {"WL_UNIT_ID": claimed["unit"]["id"], "WL_ATTEMPT_ID": claimed["attempt"]["id"]}
    started = cli("start", "--json", role="agent", principal="agent-1", **ids)
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["unit"]["state"] == "in_progress"
    one_argument = cli("verify", EVIDENCE, role="agent", principal="agent-1", **ids)
    assert one_argument.exit_code == 2
    assert "missing argument EVIDENCE_URL" in one_argument.stderr
    verified = agent(cli, "verify", "u1", "--reason", "tests pass", EVIDENCE, "--json")
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["attempt"]["outcome"] == "verified"


def test_usage_errors_exit_2_naming_what_is_missing(cli: Cli, tmp_path: Path) -> None:
    """A missing argument names its variable; a malformed option or file says why; exit 2."""
    missing = cli("show")
    assert missing.exit_code == 2
    assert "missing argument UNIT (or set WL_UNIT_ID)" in missing.stderr
    malformed = cli("events", "--limit", "many")
    assert malformed.exit_code == 2
    assert "--limit: invalid int value: 'many'" in malformed.stderr
    no_file = cli("register", str(tmp_path / "absent.csv"))
    assert no_file.exit_code == 2
    assert "does not exist" in no_file.stderr
    assert cli("register", str(tmp_path), "--batch", "5").exit_code == 2
    assert "not in the range 1..1000" in cli("register", __file__, "--batch", "0").stderr
