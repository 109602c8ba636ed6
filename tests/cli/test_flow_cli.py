"""The CLI verbs of DESIGN §13 against a real server: cap, pause, resume and controls; an
`exclusive` column in register; `show` printing why a ready unit is held back."""

# ruff: noqa: F811  (a test taking the shared `cli` fixture names it as a parameter)

from __future__ import annotations

import json
from pathlib import Path

from test_agent_cli import Cli, agent, cli, cli_server  # noqa: F401  (shared fixtures)


def register(cli: Cli, tmp_path: Path, text: str, name: str = "units.csv") -> None:
    path = tmp_path / name
    path.write_text(text)
    done = cli("register", str(path), "--json")
    assert done.exit_code == 0, done.output


def test_cap_pause_resume_and_the_controls_table(cli: Cli, tmp_path: Path) -> None:
    register(cli, tmp_path, "external_ref,fleet,domain\nu1,f,orders\nu2,f,orders\n")
    assert cli("cap", "f", "1", "--reason", "start at one").exit_code == 0
    assert agent(cli, "claim", "--start").exit_code == 0
    paused = cli("pause", "f", "--domain", "orders", "--reason", "weekend", "--json")
    assert paused.exit_code == 0, paused.output
    assert json.loads(paused.stdout)["pause_reason"] == "weekend"
    listed = cli("controls")
    assert listed.exit_code == 0, listed.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in listed.stdout.splitlines()
            if "│ f" in line]  # fmt: skip
    assert rows[0][:3] == ["f (whole fleet)", "1 / 1", "1"]
    assert rows[1][0] == "f/orders"
    assert rows[1][4] == "no"  # paused, one unit still held: not drained
    shown = cli("show", "u2")
    lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert any("fleet f domain orders is paused (weekend)" in line for line in lines), lines
    assert any("fleet f is at its cap (1 live of 1)" in line for line in lines), lines
    assert cli("resume", "f", "--domain", "orders").exit_code == 0
    assert cli("cap", "f", "none", "--reason", "open").exit_code == 0
    assert json.loads(cli("show", "u2", "--json").stdout)["held_back_by"] == []


def test_register_reads_an_exclusive_column_csv_and_jsonl(cli: Cli, tmp_path: Path) -> None:
    register(cli, tmp_path, "external_ref,fleet,exclusive\na,f,src/x;db/y\n")
    register(
        cli, tmp_path, '{"external_ref": "b", "fleet": "f", "exclusive": ["db/y"]}\n', "u.jsonl"
    )
    shown = json.loads(cli("show", "b", "--json").stdout)
    assert shown["unit"]["exclusive"] == ["db/y"]
    assert agent(cli, "claim", "--unit", "a").exit_code == 0
    shown = cli("show", "b")
    assert "key 'db/y' is held by a (claimed)" in " ".join(shown.stdout.split())
