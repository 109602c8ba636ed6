"""`work-ledger hook EVENT`: the Claude Code plugin's hooks (integrations/claude-code).

Claude Code runs each hook with the event's JSON on stdin; this reads it and talks to the
ledger with the agent's own WL_URL and WL_TOKEN. Which unit the session holds: WL_UNIT_ID
and WL_ATTEMPT_ID when `work-ledger run` started it, else what the session's `claim` tool
answered (kept per session under the user's state directory). Hooks are best effort: each
exits 0 whatever happens (a failed hook must not stop the agent; the lease stays the real
guarantee), saying on stderr what went wrong.

    session-start  the held unit's brief as additionalContext (or how to get one)
    post-tool-use  note a claim; heartbeat the held unit, at most once per HEARTBEAT_EVERY
    stop-failure   the API error as the attempt's release reason (outcome failed)
    session-end    release a unit still held (outcome abandoned)

Under `run` (WL_RESULT_FILE set), stop-failure and session-end leave the unit to `run`,
which settles it by the command's exit status.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from work_ledger.cli.agent_client import make_client
from work_ledger.cli.verbs import arg, verb
from work_ledger.client import Client
from work_ledger.client.models import UnitDetail

HEARTBEAT_EVERY = 30.0
EVENTS = ("session-start", "post-tool-use", "stop-failure", "session-end")
# The MCP claim tool's answer names the unit: "Claimed unit REF...: id UUID, attempt N".
_CLAIMED = re.compile(r"\bid ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def _state_file(session: str) -> Path:
    from platformdirs import user_state_dir

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session)[:128] or "session"
    return Path(user_state_dir("work-ledger")) / "claude-sessions" / f"{safe}.json"


def _load(session: str) -> dict[str, Any]:
    try:
        data = json.loads(_state_file(session).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(session: str, state: dict[str, Any]) -> None:
    path = _state_file(session)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state))


def _held(session: str) -> dict[str, Any]:
    """The unit this session holds: from `run`'s environment, else the session's claim."""
    if os.environ.get("WL_UNIT_ID"):
        return {"unit": os.environ["WL_UNIT_ID"], "attempt": os.environ.get("WL_ATTEMPT_ID")}
    return _load(session)


def _live_attempt(detail: UnitDetail, attempt: str | None) -> str | None:
    live = detail.live_attempt
    if live is None or (attempt is not None and live.id != attempt):
        return None
    return live.id


def brief(detail: UnitDetail) -> str:
    """What an agent needs to go on with its unit, in a few lines."""
    unit = detail.unit
    lines = [
        f"You hold work-ledger unit {unit.external_ref} (id {unit.id}, fleet {unit.fleet}, "
        f"domain {unit.domain}, state {unit.state}).",
    ]
    if detail.parent is not None:
        lines.append(f"It is one part of {detail.parent.external_ref}, split from it.")
    if detail.children:
        parts = ", ".join(c.external_ref for c in detail.children)
        lines.append(f"Its parts ({parts}) are finished: integrate and check the whole.")
    earlier = [a for a in detail.attempts if not a.live]
    for attempt in earlier[-3:]:
        lines.append(f"Attempt {attempt.attempt_no} by {attempt.agent_id} ended {attempt.outcome}.")
    for question in detail.questions:
        if question.answer:
            lines.append(f"Asked: {question.question} Answered: {question.answer}")
    lines.append(
        "Work on it; heartbeats are sent for you. When done, verify with an evidence link "
        "and dispose MIGRATED; if it is too big, split it; if you cannot go on, release it "
        "with a reason."
    )
    return "\n".join(lines)


def _session_start(client: Client, event: dict[str, Any], session: str) -> None:
    held = _held(session)
    text = (
        "You hold no work-ledger unit: call the work-ledger `claim` tool to get one "
        "(it answers why when nothing is claimable)."
    )
    if held.get("unit"):
        detail = client.get_unit(held["unit"])
        if _live_attempt(detail, held.get("attempt")) is not None:
            text = brief(detail)
    output = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    print(json.dumps(output))


def _post_tool_use(client: Client, event: dict[str, Any], session: str) -> None:
    tool = str(event.get("tool_name") or "")
    if tool.startswith("mcp__") and tool.endswith("__claim"):
        found = _CLAIMED.search(json.dumps(event.get("tool_response")))
        if found:
            detail = client.get_unit(found[1])
            live = detail.live_attempt
            if live is not None:
                _save(session, {"unit": detail.unit.id, "attempt": live.id, "beat": time.time()})
            return
    held = _held(session)
    if not held.get("unit") or time.time() - float(held.get("beat") or 0) < HEARTBEAT_EVERY:
        return
    detail = client.get_unit(held["unit"])
    attempt = _live_attempt(detail, held.get("attempt"))
    if attempt is not None:
        client.heartbeat(attempt)
    if not os.environ.get("WL_UNIT_ID"):
        _save(session, {**held, "beat": time.time()})


def _release(client: Client, session: str, outcome: str, reason: str) -> None:
    if os.environ.get("WL_RESULT_FILE"):
        return  # `run` settles the unit by the command's exit status
    held = _load(session)
    if not held.get("unit"):
        return
    detail = client.get_unit(held["unit"])
    attempt = _live_attempt(detail, held.get("attempt"))
    if attempt is not None and detail.unit.state in ("claimed", "in_progress"):
        client.release(detail.unit.id, outcome=outcome, reason=reason[:1000], attempt_id=attempt)
    _state_file(session).unlink(missing_ok=True)


def _stop_failure(client: Client, event: dict[str, Any], session: str) -> None:
    error = event.get("error") or event.get("error_type") or "unknown error"
    details = event.get("error_details") or ""
    reason = f"Claude Code stopped on an API error: {error}" + (f" ({details})" if details else "")
    _release(client, session, "failed", reason)


def _session_end(client: Client, event: dict[str, Any], session: str) -> None:
    why = event.get("reason") or "other"
    _release(
        client, session, "abandoned", f"the Claude Code session ended ({why}) still holding it"
    )


HANDLERS = {
    "session-start": _session_start,
    "post-tool-use": _post_tool_use,
    "stop-failure": _stop_failure,
    "session-end": _session_end,
}


@verb(arg("event", choices=EVENTS, help="The Claude Code hook event."))
def hook(event: str) -> None:
    """Run one of the Claude Code plugin's hooks (its event's JSON on stdin); always exit 0."""
    try:
        data = json.loads(sys.stdin.read() or "{}")
        data = data if isinstance(data, dict) else {}
        session = str(data.get("session_id") or "session")
        with make_client() as client:
            HANDLERS[event](client, data, session)
    except (Exception, SystemExit) as exc:  # best effort: never stop the agent
        print(f"work-ledger hook {event}: {type(exc).__name__}: {exc}", file=sys.stderr)
