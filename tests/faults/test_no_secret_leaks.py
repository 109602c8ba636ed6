"""No token or password in a log line or on a command line (DESIGN §7, docs/security.md).

The processes a deployment runs (`serve`, `token create`, operator and agent verbs, `run`
and the command it wraps, `grant-reader`, PostgreSQL) are started for real while a
watcher reads the command line of every process on the host; then every log line and
every command line seen is searched for each secret minted or made along the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from support.served import SECRET, WORK_LEDGER, Served, ledger_env


class CommandLines:
    """Every distinct command line on the host, read from /proc until stopped."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for proc in Path("/proc").glob("[0-9]*"):
                with contextlib.suppress(OSError):  # the process ended meanwhile
                    self.seen.add((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            self._stop.wait(0.02)

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.seen


def _run(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORK_LEDGER, *args],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _superuser_password(database_url: str) -> tuple[str | None, Path | None]:
    """The embedded server's password and its log, when the suite runs on one."""
    passfile = parse_qs(urlsplit(database_url).query).get("passfile")
    if not passfile:
        return None, None
    path = Path(passfile[0])
    return path.read_text().strip().rsplit(":", 1)[1], path.parent / "pgdata" / "log"


async def test_no_secret_in_any_log_or_command_line(database_url: str, tmp_path: Path) -> None:
    """serve, token create, the verbs, run (and its command), grant-reader and PostgreSQL
    leave no minted token and no password in their output, logs or command lines."""
    home = tmp_path / "home"
    home.mkdir()
    env = ledger_env(database_url, home)
    units = tmp_path / "units.csv"
    units.write_text("external_ref,fleet\nleak/1,f\n")
    reader_password = "reader-" + "p" * 24
    watcher = CommandLines()
    served = Served(env, home)
    outputs: list[str] = []
    try:
        await served.start()
        operator = (home / "operator.token").read_text().strip()
        client_env = {**env, "WL_URL": served.url, "WL_TOKEN": ""}
        minted = await asyncio.to_thread(
            _run, client_env, "token", "create", "--role", "agent", "--principal", "a1"
        )
        agent = minted.stdout.strip().splitlines()[-1]  # its one channel, shown once
        steps = [
            (["register", str(units)], {}),  # an operator verb: WL_HOME's token
            (["run", "--", "sh", "-c", 'sleep 1; echo "$WL_UNIT_REF"'], {"WL_TOKEN": agent}),
            (
                ["grant-reader", "--role-name", "leak_reader"],
                {"WL_READER_PASSWORD": reader_password},
            ),
        ]
        for args, extra in steps:
            done = await asyncio.to_thread(_run, client_env, *args, **extra)
            assert done.returncode == 0, done.stderr
            outputs += [done.stdout, done.stderr]
        outputs.append(minted.stderr)
    finally:
        served.stop()
        command_lines = watcher.stop()
    outputs += [log.read_text(errors="replace") for log in home.glob("serve-*.log")]
    superuser, pg_log = _superuser_password(database_url)
    if pg_log is not None and pg_log.is_file():
        outputs.append(pg_log.read_text(errors="replace"))
    secrets = [s for s in (operator, agent, reader_password, SECRET, superuser) if s]

    assert any("leak/1" in line for line in outputs)  # run's command did run
    assert any(" run -- sh -c" in line for line in command_lines)  # and the watcher saw it
    leaks = [s[:12] for s in secrets for text in [*outputs, *command_lines] if s in text]
    assert leaks == []
