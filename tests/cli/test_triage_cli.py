"""`work-ledger questions --unrouted` and `work-ledger route`: triage's loop in the shell."""

# ruff: noqa: F811  (tests take the shared fixtures of test_agent_cli as parameters)

from __future__ import annotations

import json
from pathlib import Path

from test_agent_cli import Cli, agent, cli, cli_server  # noqa: F401  (shared fixtures)


def triage(cli: Cli, *args: str) -> tuple[int, str, str]:
    result = cli(*args, role="triage", principal="triage-1")
    return result.exit_code, result.stdout, result.stderr


def test_triage_loop_ask_route_answer(cli: Cli, tmp_path: Path) -> None:
    """ask (block) → questions --unrouted → route → answer; routing twice differently: exit 4."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\nu2,f\n")
    assert cli("register", str(path)).exit_code == 0
    assert agent(cli, "claim", "--start").exit_code == 0
    assert agent(cli, "block", "u1", "keep the v1 route?").exit_code == 0

    code, out, _ = triage(cli, "questions", "--unrouted", "--json")
    (question,) = json.loads(out)["items"]
    assert (code, question["question"]) == (0, "keep the v1 route?")

    code, out, _ = triage(cli, "route", question["id"], "HQ-42", "--json")
    assert (code, json.loads(out)["external_task_id"]) == (0, "HQ-42")
    assert triage(cli, "route", question["id"], "HQ-42")[0] == 0  # the same id: a no-op
    assert json.loads(triage(cli, "questions", "--unrouted", "--json")[1])["items"] == []
    code, _, err = triage(cli, "route", question["id"], "HQ-43")
    assert code == 4
    assert "question_routed_once" in err
    assert "HQ-42" in err

    code, out, _ = triage(cli, "answer", "u1", "yes, until Q3", "--json")
    assert (code, json.loads(out)["question"]["status"]) == (0, "answered")
    _, table, _ = triage(cli, "questions", "--status", "answered")
    assert "HQ-42" in table  # the routed-as column


def test_route_needs_a_triage_or_operator_token(cli: Cli, tmp_path: Path) -> None:
    """An agent token may not route: exit 5 (auth)."""
    path = tmp_path / "u.csv"
    path.write_text("external_ref,fleet\nu1,f\n")
    cli("register", str(path))
    agent(cli, "claim", "--start")
    question = json.loads(agent(cli, "block", "u1", "which schema?", "--json").stdout)["question"]
    assert agent(cli, "route", question["id"], "HQ-1").exit_code == 5
    assert cli("route", question["id"], "HQ-1").exit_code == 0  # operator
