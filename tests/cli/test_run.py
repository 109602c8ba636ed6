"""`work-ledger run -- CMD`: claim, heartbeat while CMD runs, settle by its exit status."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from typer.testing import CliRunner

from support.lease_history import renewals_in_time, sleep_past
from support.wl_server import LedgerServer, quiet_access_log, settings_for, start
from work_ledger.cli import app
from work_ledger.client import Client

EVIDENCE = "https://ci.example/runs/11"
CLI = [sys.executable, "-c", "from work_ledger.cli import main; main()"]


@pytest.fixture
def run_server(database_url: str, tmp_path: Path) -> Iterator[LedgerServer]:
    with quiet_access_log():
        running = start(settings_for(database_url, tmp_path / "home"))
        yield running
        running.stop()


@pytest.fixture
def operator(run_server: LedgerServer) -> Iterator[Client]:
    with Client(run_server.url, run_server.token("operator", "op")) as client:
        yield client


def environment(server: LedgerServer, tmp_path: Path) -> dict[str, str]:
    return {
        "WL_URL": server.url,
        "WL_TOKEN": server.token("agent", "runner"),
        "WL_HOME": str(tmp_path / "run-home"),
    }


def launch(server: LedgerServer, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`work-ledger run ARGS` as a process of its own (to signal it, or to run beside it)."""
    return subprocess.Popen(
        [*CLI, "run", *args],
        env={**os.environ, **environment(server, tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _waiting_command(started: Path, handlers: str) -> list[str]:
    """CMD for the signal tests: Python that installs `handlers`, touches `started` and waits
    for a signal. Not `sh -c` with traps: once in a full run the shell missed the SIGINT
    `run` sent it (the test hung with the claim reported lost); Python runs its handler
    whenever the signal lands."""
    script = f"import pathlib, signal, sys, time\n{handlers}\n"
    script += f"pathlib.Path({str(started)!r}).touch()\nwhile True:\n    time.sleep(0.1)\n"
    return [sys.executable, "-c", script]


def run(server: LedgerServer, tmp_path: Path, *args: str) -> tuple[int, str]:
    """`work-ledger run ARGS` in-process: (exit status, stderr)."""
    result = CliRunner().invoke(app, ["run", *args], env=environment(server, tmp_path))
    return result.exit_code, result.stderr


def test_run_success_with_evidence_verifies(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """Exit 0 with an evidence link and a cost: cost recorded, unit verified, env exposed."""
    operator.register([{"external_ref": "orders/7", "fleet": "f"}])
    seen = tmp_path / "seen.txt"
    script = (
        f'echo "$WL_UNIT_REF $WL_UNIT_ID $WL_ATTEMPT_ID" > {seen}; '
        f'echo \'{{"cost_cents": 30, "evidence_url": "{EVIDENCE}"}}\' > "$WL_RESULT_FILE"'
    )
    status, err = run(run_server, tmp_path, "--", "sh", "-c", script)
    assert status == 0, err
    detail = operator.get_unit("orders/7")
    assert (detail.unit.state, detail.unit.cost_cents) == ("verified", 30)
    assert detail.unit.evidence_urls == [EVIDENCE]
    assert seen.read_text().split() == ["orders/7", detail.unit.id, detail.attempts[0].id]


def test_run_without_evidence_leaves_in_progress(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """Exit 0 without an evidence link: the unit stays in_progress."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    status, err = run(run_server, tmp_path, "--", "true")
    assert status == 0
    assert "left u1 in_progress" in err
    assert operator.get_unit("u1").unit.state == "in_progress"


def test_run_failure_releases_failed(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """A non-zero exit releases the unit with outcome failed and passes the status on."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    status, _ = run(run_server, tmp_path, "--unit", "u1", "--", "sh", "-c", "exit 3")
    assert status == 3
    detail = operator.get_unit("u1")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")


def test_run_long_command_keeps_lease(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """A command outlives its lease's first expiry: `run` renewed it each time before it ran
    out (read from the events), so no other agent could take the unit meanwhile."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    go = tmp_path / "go"
    script = (
        f"while [ ! -e {go} ]; do sleep 0.05; done; "
        f'echo \'{{"evidence_url": "{EVIDENCE}"}}\' > "$WL_RESULT_FILE"'
    )
    # A 6 s lease is renewed every 2 s: 4 s of slack for a busy machine.
    child = launch(run_server, tmp_path, "--lease", "6", "--", "sh", "-c", script)
    try:
        expiry = _first_lease_expiry(operator, "u1", 6)
        sleep_past(expiry)
        with Client(run_server.url, run_server.token("agent", "rival")) as rival:
            assert rival.claim_next().unit is None
    finally:
        go.touch()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    detail = operator.get_unit("u1")
    assert (detail.unit.state, detail.unit.attempt_count) == ("verified", 1)
    assert renewals_in_time(operator, "u1", expiry) >= 1


def _first_lease_expiry(operator: Client, unit: str, lease: float) -> dt.datetime:
    """When the lease the unit's first claim took runs out (the claim and its attempt share
    one `now()`), once it is claimed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        attempts = operator.get_unit(unit).attempts
        if attempts and attempts[0].started_at is not None:
            return attempts[0].started_at + dt.timedelta(seconds=lease)
        time.sleep(0.05)
    raise AssertionError("run did not claim the unit")


def test_run_forwards_sigterm(run_server: LedgerServer, operator: Client, tmp_path: Path) -> None:
    """SIGTERM to `run` reaches CMD; CMD's exit status settles the unit (released failed)."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    started = tmp_path / "started"
    handler = "signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))"
    child = launch(run_server, tmp_path, "--", *_waiting_command(started, handler))
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 7, err
    detail = operator.get_unit("u1")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")


def test_run_nothing_to_claim_exits_3(run_server: LedgerServer, tmp_path: Path) -> None:
    """An empty ledger: exit 3, the command never runs."""
    marker = tmp_path / "ran"
    status, err = run(run_server, tmp_path, "--", "touch", str(marker))
    assert status == 3
    assert "nothing_to_claim" in err
    assert not marker.exists()


def test_run_lost_claim_stops_command(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """`run` stalls past its lease and a rival reclaims: CMD gets SIGINT (Claude Code then
    flushes its telemetry; SIGTERM would end it at once), exit 4."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    started, interrupted = tmp_path / "started", tmp_path / "interrupted"
    handlers = (
        f"out = pathlib.Path({str(interrupted)!r})\n"
        "def stop(signum, frame):\n"
        "    out.write_text('INT\\n')\n"
        "    sys.exit(130)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "signal.signal(signal.SIGTERM, lambda signum, frame: out.write_text('TERM\\n'))"
    )
    child = launch(run_server, tmp_path, "--lease", "1", "--", *_waiting_command(started, handlers))
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.5)
        with Client(run_server.url, run_server.token("agent", "rival")) as rival:
            assert rival.claim_next().unit is not None
    finally:
        child.send_signal(signal.SIGCONT)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 4, err
    assert "attempt_superseded" in err
    assert interrupted.read_text() == "INT\n"
    detail = operator.get_unit("u1")
    assert (detail.unit.claimed_by, [a.outcome for a in detail.attempts]) == (
        "rival",
        ["superseded", None],
    )


def _home_with_operator_token(server: LedgerServer, tmp_path: Path) -> tuple[Path, str]:
    """A WL_HOME holding the operator token, as `serve` leaves it on its host."""
    home = tmp_path / "serve-home"
    home.mkdir()
    token = server.token("operator", "op")
    (home / "operator.token").write_text(token + "\n")
    return home, token


@pytest.mark.parametrize(
    "verb", [["claim"], ["run", "--", "touch", "ran"], ["heartbeat", "u1"], ["mcp"]]
)
def test_agent_commands_never_fall_back_to_the_operator_token(
    run_server: LedgerServer, operator: Client, tmp_path: Path, verb: list[str]
) -> None:
    """No WL_TOKEN, the operator token in WL_HOME: agent verbs, run and mcp stop (exit 5),
    say how to mint an agent's token, and claim nothing."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    home, _ = _home_with_operator_token(run_server, tmp_path)
    env = {"WL_URL": run_server.url, "WL_TOKEN": "", "WL_HOME": str(home)}
    result = CliRunner().invoke(app, verb, env=env)
    assert result.exit_code == 5, result.output
    assert "work-ledger token create --role agent" in result.stderr
    assert operator.get_unit("u1").unit.state == "ready"
    assert not (Path.cwd() / "ran").exists()


def test_run_hands_the_command_only_the_agents_token(
    run_server: LedgerServer, operator: Client, tmp_path: Path
) -> None:
    """CMD's environment holds the agent's token and neither the operator token's folder,
    the token secret nor a database URL."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    home, operator_token = _home_with_operator_token(run_server, tmp_path)
    agent_token = run_server.token("agent", "runner")
    seen = tmp_path / "env.json"
    dump = f"import json, os; open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))"
    env = {
        "WL_URL": run_server.url,
        "WL_TOKEN": agent_token,
        "WL_HOME": str(home),
        "WL_SECRET": "s" * 32,
        "WL_DATABASE_URL": "postgresql://postgres:pw@/x",
    }
    result = CliRunner().invoke(app, ["run", "--", sys.executable, "-c", dump], env=env)
    assert result.exit_code == 0, result.output
    child = json.loads(seen.read_text())
    assert child["WL_TOKEN"] == agent_token
    assert [k for k in ("WL_HOME", "WL_SECRET", "WL_DATABASE_URL") if k in child] == []
    assert operator_token not in json.dumps(child)
