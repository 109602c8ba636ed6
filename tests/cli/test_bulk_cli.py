"""`work-ledger bulk dispose|release` against a real server: a dry run by default that
prints what would change, `--apply` to do it, refusals with their exit codes."""

# ruff: noqa: F811  (a test taking the shared `cli` fixture names it as a parameter)

from __future__ import annotations

import json
from pathlib import Path

from test_agent_cli import Cli, agent, cli, cli_server  # noqa: F401  (shared fixtures)

DEFER = ("bulk", "dispose", "--fleet", "legacy", "--domain", "orders", "--disposition", "DEFERRED")
WHY = ("--reason", "the orders system was switched off")


def register(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "units.csv"
    path.write_text(
        "external_ref,fleet,domain\norders/a,legacy,orders\norders/b,legacy,orders\n"
        "billing/a,legacy,billing\n"
    )
    assert cli("register", str(path), "--json").exit_code == 0


def state_of(cli: Cli, ref: str) -> str:
    state: str = json.loads(cli("show", ref, "--json").stdout)["unit"]["state"]
    return state


def test_dry_run_prints_what_would_change_and_apply_does_it(cli: Cli, tmp_path: Path) -> None:
    """Without --apply: a table of what would change, a held unit skipped with its rule,
    nothing changed. With --apply: the same units change."""
    register(cli, tmp_path)
    assert agent(cli, "claim", "--unit", "orders/b").exit_code == 0
    dry = cli(*DEFER, *WHY)
    assert dry.exit_code == 0, dry.output
    rows = [" ".join(line.replace("│", " ").split()) for line in dry.stdout.splitlines()]
    assert "orders/a ready abandoned DEFERRED" in rows, dry.stdout
    assert any(row.startswith("orders/b claimed (skipped) unit_state_transition") for row in rows)
    assert "dry run: 2 matched, 1 would change, 1 skipped; nothing changed." in dry.stdout
    assert state_of(cli, "orders/a") == "ready"
    applied = cli(*DEFER, *WHY, "--apply", "--json")
    assert applied.exit_code == 0, applied.output
    body = json.loads(applied.stdout)
    assert (body["dry_run"], body["matched"]) == (False, 2)
    assert [c["external_ref"] for c in body["changed"]] == ["orders/a"]
    assert body["skipped"][0]["rule"] == "unit_state_transition_allowed"
    assert state_of(cli, "orders/a") == "abandoned"
    assert state_of(cli, "billing/a") == "ready"


def test_release_of_what_an_agent_holds(cli: Cli, tmp_path: Path) -> None:
    """`bulk release --held-by A --state claimed --apply` frees that agent's units."""
    register(cli, tmp_path)
    assert agent(cli, "claim", "--unit", "orders/a").exit_code == 0
    released = cli(
        "bulk", "release", "--fleet", "legacy", "--held-by", "agent-1", "--state", "claimed",
        "--state", "in_progress", *WHY, "--apply",
    )  # fmt: skip
    assert released.exit_code == 0, released.output
    assert "1 matched, 1 changed, 0 skipped" in released.stdout
    assert state_of(cli, "orders/a") == "ready"


def test_refusals_exit_with_their_codes(cli: Cli, tmp_path: Path) -> None:
    """Over the limit exits 1 naming the count; an agent exits 5; no --reason exits 2."""
    register(cli, tmp_path)
    over = cli(
        "bulk", "dispose", "--fleet", "legacy", "--disposition", "DEAD", *WHY, "--limit", "2"
    )
    assert over.exit_code == 1
    assert "matches 3 units, more than limit 2" in over.output
    refused = agent(cli, *DEFER, *WHY)
    assert refused.exit_code == 5, refused.output
    assert cli(*DEFER).exit_code == 2
    assert state_of(cli, "orders/a") == "ready"
