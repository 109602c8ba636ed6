"""`work-ledger run -- CMD...`: claim a unit, run CMD on it while heartbeating, settle by exit.

CMD sees the unit in its environment:

    WL_UNIT_ID      the unit's id            WL_UNIT_REF     its external_ref
    WL_ATTEMPT_ID   the live attempt's id    WL_RESULT_FILE  where CMD may write its result
    WL_URL, WL_TOKEN                          so CMD can call the agent verbs itself
    OTEL_RESOURCE_ATTRIBUTES  wl.unit_id=ID,wl.attempt_id=ID appended to any it had
    CLAUDE_CODE_ENABLE_TELEMETRY=1, OTEL_LOGS_EXPORTER=otlp and the logs exporter's
    protocol, endpoint ($WL_URL/otlp/v1/logs) and Authorization header (the agent's token):
                              Claude Code sends each API call's cost to the ledger as it
                              spends it (DESIGN §13), so a SIGKILLed agent's money is there
                              up to its last call. OTEL_LOGS_EXPORT_INTERVAL stays as set,
                              else 5000 ms. WL_RUN_TELEMETRY=0 leaves all of these unset.

WL_TOKEN is the agent's own token (`run` never falls back to the operator's), and CMD does
not inherit WL_HOME, WL_SECRET, database URLs or passwords.

CMD may write WL_RESULT_FILE as JSON: {"cost_cents": 123, "evidence_url": "https://..."},
or Claude Code's own result (`claude -p ... --output-format json > "$WL_RESULT_FILE"`, or
stream-json lines), recorded as one estimated cost record per model with its tokens, an
error result's money too, its error named in the release's reason (`cli/result_file.py`).
When CMD ends, the cost (if any) is recorded; then exit status 0 verifies the unit with the
evidence link (or leaves it in_progress when there is none) and a non-zero status releases
it with outcome `failed`. SIGINT and SIGTERM are forwarded to CMD. If the claim is lost
meanwhile (another agent reclaimed the unit), CMD gets SIGINT (Claude Code ends its turn
and flushes its telemetry on SIGINT; on SIGTERM it exits 143 at once), SIGTERM if it is
still running STOP_GRACE seconds later, and `run` exits 4. If `run` itself dies, its
heartbeats stop and the lease simply lapses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from argparse import REMAINDER
from pathlib import Path
from types import FrameType

from work_ledger.cli.agent_client import (
    CLAIM_UNIT,
    EXIT_REFUSED,
    LEASE,
    client_settings,
    handled,
    make_client,
)
from work_ledger.cli.console import err_console
from work_ledger.cli.result_file import Result, read_result
from work_ledger.cli.verbs import arg, verb
from work_ledger.client import Work
from work_ledger.errors import WorkLedgerError

FORWARDED = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE = 10.0
EXPORT_INTERVAL_MS = "5000"


# What could do more than the agent's own token: the operator token's folder, the token
# secret, database URLs and passwords. CMD never sees them.
WITHHELD = (
    "WL_HOME",
    "WL_SECRET",
    "WL_DATABASE_URL",
    "WL_READ_DATABASE_URL",
    "WL_READER_PASSWORD",
    "PGPASSWORD",
    "PGPASSFILE",
)


def _environment(work: Work, result_file: Path) -> dict[str, str]:
    url, token = client_settings()
    env = {k: v for k, v in os.environ.items() if k not in WITHHELD}
    env.update(
        WL_UNIT_ID=work.unit.id,
        WL_UNIT_REF=work.unit.external_ref,
        WL_ATTEMPT_ID=work.attempt.id,
        WL_RESULT_FILE=str(result_file),
        WL_URL=url,
        WL_TOKEN=token,
        OTEL_RESOURCE_ATTRIBUTES=_otel_attributes(work, env.get("OTEL_RESOURCE_ATTRIBUTES")),
    )
    if env.get("WL_RUN_TELEMETRY", "1") != "0":
        env.update(_telemetry(url, token))
        env.setdefault("OTEL_LOGS_EXPORT_INTERVAL", EXPORT_INTERVAL_MS)
    return env


def _telemetry(url: str, token: str) -> dict[str, str]:
    """Claude Code's logs exporter pointed at the ledger. The logs-only variables, so an
    exporter of metrics or traces the operator set up keeps its own endpoint."""
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"{url.rstrip('/')}/otlp/v1/logs",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS": f"Authorization=Bearer {token}",
    }


def _otel_attributes(work: Work, existing: str | None) -> str:
    """CMD's OpenTelemetry resource attributes: the unit and attempt, after any it had, so
    Claude Code's telemetry names the attempt its spend belongs to."""
    ours = f"wl.unit_id={work.unit.id},wl.attempt_id={work.attempt.id}"
    kept = (existing or "").strip().strip(",")
    return f"{kept},{ours}" if kept else ours


def _run_command(command: list[str], env: dict[str, str], work: Work) -> int:
    """Run CMD to its end, forwarding signals; a lost claim interrupts it."""
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        err_console.print(
            f"cannot start {command[0]!r}: {exc}", markup=False, highlight=False, soft_wrap=True
        )
        return 127

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    def stop() -> None:
        if child.poll() is None:
            child.terminate()

    def lost(exc: WorkLedgerError) -> None:
        from rich.markup import escape

        err_console.print(
            f"[red]{exc.code}[/red]: {escape(exc.detail)}", highlight=False, soft_wrap=True
        )
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            # A command that ignores SIGINT is terminated after a grace period.
            stopper = threading.Timer(STOP_GRACE, stop)
            stopper.daemon = True
            stopper.start()

    work.on_lost = lost
    on_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in FORWARDED} if on_main else {}
    try:
        return child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _record(work: Work, result: Result) -> None:
    for record in result.costs:
        work.record(record)


def _settle(work: Work, status: int, result: Result) -> str:
    _record(work, result)
    evidence = result.evidence_url
    if status != 0:
        why = f"killed by signal {-status}" if status < 0 else f"exited with status {status}"
        if result.error:
            why = f"{why} ({result.error})"
        work.release(outcome="failed", reason=f"command {why}")
        return f"released {work.unit.external_ref} (attempt failed: command {why})"
    if evidence:
        work.verify(evidence)
        return f"verified {work.unit.external_ref} with {evidence}"
    return (
        f"left {work.unit.external_ref} in_progress: the command wrote no evidence_url to "
        "WL_RESULT_FILE; verify it with `work-ledger verify` before its lease lapses"
    )


@verb(
    # Everything from CMD on is CMD's own, its options too.
    arg("command", nargs=REMAINDER, metavar="-- CMD...", help="The command to run."),
    arg("--domain", help="Claim the next unit of this domain."),
    CLAIM_UNIT,
    LEASE,
    arg("--wait", type=int, help="Wait up to this many seconds for a unit."),
)
def run(
    command: list[str], domain: str | None, unit: str | None, lease: int | None, wait: int | None
) -> None:
    """Claim a unit, run CMD on it while heartbeating, and settle it by CMD's exit status."""
    with handled(False), make_client() as client:
        work = client.claim_work(domain=domain, unit=unit, lease_seconds=lease, wait_seconds=wait)
        # Plain lines, not rich: it would cost the wrapper ~6 MB for no styling.
        claimed = f"claimed {work.unit.external_ref} (attempt {work.attempt.attempt_no})"
        print(claimed, file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="wl-run-") as scratch:
            result_file = Path(scratch) / "result.json"
            work.start_heartbeat()
            try:
                status = _run_command(command, _environment(work, result_file), work)
            finally:
                work.stop_heartbeat()
            result = read_result(result_file)
        if work.lost is not None:
            _record(work, result)  # spent money is recorded even on a lost attempt
            raise SystemExit(EXIT_REFUSED)
        print(_settle(work, status, result), file=sys.stderr, flush=True)
    raise SystemExit(128 - status if status < 0 else status)
