"""The CLI verbs of DESIGN §12 against a real server: register with prerequisites and
limits, show what a unit waits on, split, waive, budget set and list, cost by model."""

# ruff: noqa: F811  (a test taking the shared `cli` fixture names it as a parameter)

from __future__ import annotations

import json
from pathlib import Path

from test_agent_cli import Cli, agent, cli, cli_server  # noqa: F401  (shared fixtures)

EVIDENCE = "https://ci.example/runs/13"


def register(cli: Cli, tmp_path: Path, text: str, name: str = "units.csv") -> None:
    path = tmp_path / name
    path.write_text(text)
    done = cli("register", str(path), "--json")
    assert done.exit_code == 0, done.output


def finish(cli: Cli, ref: str) -> None:
    for args in (("claim", "--unit", ref, "--start"), ("verify", ref, EVIDENCE)):
        assert agent(cli, *args).exit_code == 0
    assert agent(cli, "dispose", ref, "MIGRATED").exit_code == 0


def test_register_requires_and_show_prints_what_a_unit_waits_on(cli: Cli, tmp_path: Path) -> None:
    """A CSV `requires` column (refs separated by `;`) and `max_attempts`: the dependent
    waits, and `show` names the prerequisite holding it and the attempt allowance."""
    register(
        cli, tmp_path, "external_ref,fleet,requires,max_attempts\nlib,f,,\nui,f,,\nsvc,f,lib;ui,2\n"
    )
    shown = cli("show", "svc")
    assert shown.exit_code == 0, shown.output
    assert "waiting" in shown.stdout
    rows = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert "waits on prerequisite lib (ready)" in rows
    assert "prerequisite ui (ready)" in rows
    assert "attempts allowed 0 failed of 2 allowed (max_attempts 2)" in rows
    as_json = json.loads(cli("show", "svc", "--json").stdout)
    assert [r["external_ref"] for r in as_json["requires"]] == ["lib", "ui"]
    finish(cli, "lib")
    finish(cli, "ui")
    assert json.loads(cli("show", "svc", "--json").stdout)["unit"]["state"] == "ready"


def test_jsonl_requires_list_and_split_from_file(cli: Cli, tmp_path: Path) -> None:
    """JSONL `requires` as a list; `split REF CHILD --from-file F` registers the children
    (one requiring its sibling) and the parent waits on them."""
    register(
        cli,
        tmp_path,
        '{"external_ref": "core", "fleet": "f"}\n'
        '{"external_ref": "app", "fleet": "f", "requires": ["core"]}\n',
        "units.jsonl",
    )
    assert agent(cli, "claim", "--unit", "core", "--start").exit_code == 0
    children = tmp_path / "children.csv"
    children.write_text("external_ref,requires\ncore/2,core/1\n")
    split = agent(cli, "split", "core", "core/1", "--from-file", str(children), "--reason", "big")
    assert split.exit_code == 0, split.output
    assert "split core into 2: core/1, core/2" in split.stdout
    parent = json.loads(cli("show", "core", "--json").stdout)
    assert parent["unit"]["state"] == "waiting"
    assert [c["external_ref"] for c in parent["children"]] == ["core/1", "core/2"]
    second = json.loads(cli("show", "core/2", "--json").stdout)
    assert [r["external_ref"] for r in second["requires"]] == ["core/1"]


def test_split_without_children_is_a_usage_error(cli: Cli) -> None:
    """No CHILD_REF and no --from-file: exit 2, saying what to give."""
    done = agent(cli, "split", "core")
    assert done.exit_code == 2
    assert "split needs at least one child" in done.output


def test_waive_frees_a_unit_held_by_a_dead_prerequisite(cli: Cli, tmp_path: Path) -> None:
    """`waive REF PREREQ`: the dependent of a DEAD prerequisite becomes ready."""
    register(cli, tmp_path, "external_ref,fleet,requires\nlib,f,\nsvc,f,lib\n")
    assert agent(cli, "claim", "--unit", "lib", "--start").exit_code == 0
    assert agent(cli, "dispose", "lib", "DEAD", "--reason", "gone").exit_code == 0
    waived = cli("waive", "svc", "lib", "--reason", "svc goes on alone", "--json")
    assert waived.exit_code == 0, waived.output
    assert json.loads(waived.stdout)["unit"]["state"] == "ready"


def test_budget_set_list_and_cost_by_model(cli: Cli, tmp_path: Path) -> None:
    """`budget set` caps a fleet and a domain; `cost --model --*-tokens --estimated`
    records by model; `budget list` shows spent, cap, remaining and the share used."""
    register(cli, tmp_path, "external_ref,fleet,domain\nu1,f,orders\n")
    assert cli("budget", "set", "f", "1000").exit_code == 0
    capped = cli("budget", "set", "f", "200", "--domain", "orders", "--json")
    assert json.loads(capped.stdout)["domain"] == "orders"
    assert agent(cli, "claim", "--start").exit_code == 0
    cost = agent(
        cli, "cost", "u1", "50", "--model", "claude-opus-4-6", "--input-tokens", "1200",
        "--output-tokens", "300", "--cache-read-tokens", "9000", "--cache-write-tokens", "400",
        "--estimated", "--json",
    )  # fmt: skip
    assert cost.exit_code == 0, cost.output
    listed = cli("budget", "list")
    assert listed.exit_code == 0, listed.output
    rows = [line.split("│") for line in listed.stdout.splitlines() if "│ f " in line]
    cells = [[c.strip() for c in row[1:-1]] for row in rows]
    assert cells == [
        ["f", "(whole fleet)", "50", "1000", "950", "5 %"],
        ["f", "orders", "50", "200", "150", "25 %"],
    ]
    (attempt,) = json.loads(cli("show", "u1", "--json").stdout)["attempts"]
    assert attempt["cost_by_model"] == [
        {
            "model": "claude-opus-4-6",
            "cost_cents": 50,
            "estimated_cents": 50,
            "input_tokens": 1200,
            "output_tokens": 300,
            "cache_read_tokens": 9000,
            "cache_write_tokens": 400,
        }
    ]


def test_budget_set_without_a_cap_is_a_usage_error(cli: Cli) -> None:
    """`budget set FLEET` alone: exit 2, with the usage."""
    done = cli("budget", "set", "f")
    assert done.exit_code == 2
    assert "budget set needs FLEET and CAP_CENTS" in done.output


def test_register_names_rows_with_unknown_prerequisites_or_a_cycle(
    cli: Cli, tmp_path: Path
) -> None:
    """A row requiring a ref that exists nowhere, and two rows requiring each other, are
    bad rows named by line; the rest of the file is registered."""
    path = tmp_path / "units.csv"
    path.write_text(
        "external_ref,fleet,requires\nok,f,\nlost,f,nowhere\nx,f,y\ny,f,x\nafter,f,ok\n"
    )
    done = cli("register", str(path), "--json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    assert (report["created"], report["bad"]) == (2, 3)
    bad = {row["line"]: row["error"] for row in report["bad_rows"]}
    assert sorted(bad) == [3, 4, 5]
    assert "unknown_prerequisite" in bad[3]
    assert "prerequisite_cycle" in bad[4]
    assert json.loads(cli("show", "after", "--json").stdout)["unit"]["state"] == "waiting"


def test_show_a_unit_parked_at_its_limit_prints_the_ledgers_question(
    cli: Cli, tmp_path: Path
) -> None:
    """max_attempts 1, one failed attempt: the unit waits on the answer to the question the
    ledger asked, and `show` prints that question's text."""
    register(cli, tmp_path, "external_ref,fleet,max_attempts\npoison,f,1\n")
    assert agent(cli, "claim", "--start").exit_code == 0
    assert agent(cli, "release", "poison", "--outcome", "failed").exit_code == 0
    detail = json.loads(cli("show", "poison", "--json").stdout)
    (question,) = detail["questions"]
    assert detail["waiting_on"] == [{"kind": "answer", "unit": None, "question_id": question["id"]}]
    shown = cli("show", "poison").stdout
    first_words = " ".join(question["question"].split()[:3])
    waits = f"waits on the answer to question {question['id']}: {first_words}"
    assert waits in " ".join(shown.split())
    rows = [" ".join(line.split()) for line in shown.splitlines()]
    assert "attempts allowed 1 failed of 1 allowed (max_attempts 1)" in rows
