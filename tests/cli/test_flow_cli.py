"""The CLI verbs of DESIGN §13 against a real server: cap, pause, resume and controls; an
`exclusive` column in register; `show` printing why a ready unit is held back."""

# ruff: noqa: F811  (a test taking the shared `cli` fixture names it as a parameter)

from __future__ import annotations

import json
import re
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


def test_cap_sets_a_ramp_gate_shown_with_paused_since_in_the_table(cli: Cli) -> None:
    """--gate SHARE/LAST sets the ramp gate; the table shows it, and when a scope was paused;
    a malformed gate is refused naming the form, and changes nothing."""
    gated = cli("cap", "f", "10", "--gate", "0.1/200", "--reason", "ramp", "--json")
    assert gated.exit_code == 0, gated.output
    assert json.loads(gated.stdout)["gate"] == {"max_failed_share": 0.1, "last_attempts": 200}
    assert cli("pause", "f", "--reason", "weekend").exit_code == 0
    bad = cli("cap", "f", "20", "--gate", "tenth", "--reason", "ramp")
    assert bad.exit_code != 0
    assert "SHARE/LAST" in " ".join(bad.output.split())
    listed = cli("controls")
    row = next(
        [c.strip() for c in line.split("│")[1:-1]]
        for line in listed.stdout.splitlines()
        if "│ f" in line
    )
    assert row[1] == "0 / 10"  # the bad gate changed nothing
    assert re.fullmatch(r"\d{4}-\d\d-\d\d.*", row[3])  # paused since (may wrap)
    assert (row[4], row[5]) == ("yes", "<= 0.1 failed")  # the gate's cell wraps: "of last 200"
    assert "of last 200" in listed.stdout
    removed = cli("cap", "f", "10", "--gate", "none", "--reason", "no gate", "--json")
    assert json.loads(removed.stdout)["gate"] is None
