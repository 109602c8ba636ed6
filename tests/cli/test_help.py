"""`work-ledger --help` lists every verb, and `work-ledger VERB --help` answers for each."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from work_ledger.cli import app
from work_ledger.cli.typer_app import VERBS
from work_ledger.cli.verbs import CLIENT_VERBS

EVERY_VERB = sorted({*CLIENT_VERBS, *VERBS})


def test_help_lists_every_verb() -> None:
    listed = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    named = {line.split()[1] for line in listed.stdout.splitlines() if line.startswith("│ ")}
    assert set(EVERY_VERB) <= named


@pytest.mark.parametrize("verb", EVERY_VERB)
def test_each_verb_has_help(verb: str) -> None:
    shown = CliRunner().invoke(app, [verb, "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "Usage" in shown.stdout or "usage" in shown.stdout
    assert verb in shown.stdout
