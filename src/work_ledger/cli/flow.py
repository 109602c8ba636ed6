"""`cap`, `pause`, `resume` and `controls`: the operator steers the fleet (DESIGN §13).

The ledger decides every claim against these controls itself; a change is kept in the
database, with who made it and why (`GET /controls/events`).
"""

from __future__ import annotations

from typing import Any

from work_ledger.cli.agent_client import JSON, emit_json, handled, make_client
from work_ledger.cli.console import console
from work_ledger.cli.tables import controls_table
from work_ledger.cli.verbs import arg, verb
from work_ledger.errors import InvalidInput

DOMAIN = arg("--domain", help="Only this domain of the fleet (default: the whole fleet).")
REASON = arg("--reason", required=True, help="Why (kept with the change).")


def _show(control: object, as_json: bool) -> None:
    if as_json:
        emit_json(control)
    else:
        console.print(controls_table([control]))  # type: ignore[list-item]


@verb(
    arg("fleet", help="The fleet."),
    arg("max_live", help="The most live units (claimed or in_progress); 'none' removes it."),
    DOMAIN,
    arg("--reason", default="cap set from the CLI", help="Why (kept with the change)."),
    arg("--force", action="store_true", help="Raise past a closed ramp gate (recorded)."),
    arg(
        "--gate",
        help="A ramp gate, SHARE/LAST: a raise needs LAST attempts ended since the cap last "
        "changed, at most SHARE of the last LAST failed (e.g. 0.1/200); 'none' removes it.",
    ),
    JSON,
)
def cap(
    fleet: str,
    max_live: str,
    domain: str | None,
    reason: str,
    force: bool,
    gate: str | None,
    as_json: bool,
) -> None:
    """Cap the live units of a fleet (or of one domain). Operator. A gated raise is refused
    (ramp_gate_closed) until the gate's figures allow it, or with --force."""
    limit = None if max_live.lower() == "none" else int(max_live)
    with handled(as_json), make_client(operator=True) as client:
        extra: dict[str, Any] = {} if gate is None else {"gate": _gate(gate)}
        found = client.set_controls(
            fleet, reason=reason, domain=domain, max_live=limit, force=force, **extra
        )
        _show(found, as_json)


def _gate(text: str) -> dict[str, Any] | None:
    """SHARE/LAST as the API's gate object; the API checks the bounds and names them."""
    if text.lower() == "none":
        return None
    share, _, last = text.partition("/")
    try:
        return {"max_failed_share": float(share), "last_attempts": int(last)}
    except ValueError:
        raise InvalidInput(
            f"--gate {text!r} is not SHARE/LAST: send the most failed share of the last "
            "attempts and how many, e.g. --gate 0.1/200 (or --gate none to remove it)"
        ) from None


@verb(arg("fleet", help="The fleet."), DOMAIN, REASON, JSON)
def pause(fleet: str, domain: str | None, reason: str, as_json: bool) -> None:
    """Stop new claims in a fleet (or one domain): held work goes on and drains. Operator."""
    with handled(as_json), make_client(operator=True) as client:
        _show(client.set_controls(fleet, reason=reason, domain=domain, paused=True), as_json)


@verb(
    arg("fleet", help="The fleet."),
    DOMAIN,
    arg("--reason", default="resumed from the CLI", help="Why (kept with the change)."),
    JSON,
)
def resume(fleet: str, domain: str | None, reason: str, as_json: bool) -> None:
    """Resume claims in a paused fleet (or domain); wakes waiting claims. Operator."""
    with handled(as_json), make_client(operator=True) as client:
        _show(client.set_controls(fleet, reason=reason, domain=domain, paused=False), as_json)


@verb(JSON)
def controls(as_json: bool) -> None:
    """Every controlled scope: live / cap, held, paused since, drained, gate."""
    with handled(as_json), make_client(operator=True) as client:
        found = client.list_controls()
        if as_json:
            emit_json({"items": found})
        else:
            console.print(controls_table(found))
