"""The fleet's flow controls (DESIGN §13), without the database: the rules a change of
controls is held to, the ramp gate's arithmetic, and the refusals a claim meets.

The database decides every claim (migration 0022); these say why, in words an agent acts on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from work_ledger.domain.model import NEXT_ACTIONS, Unit
from work_ledger.errors import (
    CapReached,
    ExclusiveKeyHeld,
    InvalidInput,
    RampGateClosed,
    ScopePaused,
)

MAX_LIVE = 100_000
MAX_REASON = 2000
MAX_GATE_ATTEMPTS = 10_000


class _Absent:
    """A field the request did not send: it stays as it is."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class ControlChange:
    """What a POST /controls asks for; ABSENT fields stay as they are."""

    fleet: str
    reason: str
    domain: str | None = None
    max_live: int | None = ABSENT
    paused: bool = ABSENT
    gate: dict[str, Any] | None = ABSENT
    force: bool = False


def scope_name(fleet: str, domain: str | None) -> str:
    return f"fleet {fleet}" if domain is None else f"fleet {fleet}, domain {domain}"


def check_change(change: ControlChange) -> None:
    """Bad input is a 422 that changes nothing."""
    for name, value in (("fleet", change.fleet), ("domain", change.domain)):
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= 256):
            raise InvalidInput(f"{name} must be a string of 1..256 characters")
    if not isinstance(change.reason, str) or not 1 <= len(change.reason.strip()) <= MAX_REASON:
        raise InvalidInput(
            f"reason is required: say in 1..{MAX_REASON} characters why the controls change "
            "(it is kept in GET /controls/events)",
            invariant="control_reason_required",
        )
    max_live = change.max_live
    if (
        max_live is not ABSENT
        and max_live is not None
        and (
            isinstance(max_live, bool)
            or not isinstance(max_live, int)
            or not 0 <= max_live <= MAX_LIVE
        )
    ):
        raise InvalidInput(
            f"max_live must be a whole number 0..{MAX_LIVE}, or null to remove the cap, "
            f"not {max_live!r}"
        )
    if change.paused is not ABSENT and not isinstance(change.paused, bool):
        raise InvalidInput(f"paused must be true or false, not {change.paused!r}")
    if change.gate is not ABSENT and change.gate is not None:
        check_gate(change.gate)


def check_gate(gate: Mapping[str, Any]) -> None:
    share = gate.get("max_failed_share") if isinstance(gate, Mapping) else None
    last = gate.get("last_attempts") if isinstance(gate, Mapping) else None
    if (
        not isinstance(gate, Mapping)
        or set(gate) != {"max_failed_share", "last_attempts"}
        or isinstance(share, bool)
        or not isinstance(share, int | float)
        or not 0 <= share <= 1
        or isinstance(last, bool)
        or not isinstance(last, int)
        or not 1 <= last <= MAX_GATE_ATTEMPTS
    ):
        raise InvalidInput(
            'gate is {"max_failed_share": 0..1, "last_attempts": '
            f"1..{MAX_GATE_ATTEMPTS}}} or null to remove it, not {gate!r}"
        )


def is_raise(before: int | None, after: int | None, *, existed: bool) -> bool:
    """Raising a cap: a higher number, or removing it (null). A first cap is not a raise."""
    if not existed or before is None:
        return False
    return after is None or after > before


def gate_figures(gate: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    counted, failed = int(row["counted"]), int(row["failed"])
    share = failed / counted if counted else None
    return {
        "failed_share": share,
        "ended_attempts": int(row["ended_attempts"]),
        "max_failed_share": gate["max_failed_share"],
        "last_attempts": gate["last_attempts"],
    }


def gate_open(figures: Mapping[str, Any]) -> bool:
    share = figures["failed_share"]
    return (
        figures["ended_attempts"] >= figures["last_attempts"]
        and share is not None
        and share <= figures["max_failed_share"]
    )


def ramp_gate_closed(fleet: str, domain: str | None, figures: dict[str, Any]) -> RampGateClosed:
    share = figures["failed_share"]
    shown = "no" if share is None else f"{share:.3f}"
    return RampGateClosed(
        f"the ramp gate of {scope_name(fleet, domain)} refuses raising its cap: "
        f"{figures['ended_attempts']} attempts ended since the cap last changed (the gate "
        f"wants {figures['last_attempts']}), and the failed share of the last ones is "
        f"{shown} (at most {figures['max_failed_share']}). Nothing changed. Wait for more "
        'attempts to end, lower the cap, or send "force": true to raise it anyway (the '
        "control event records it).",
        invariant="ramp_gate_closed",
        extra={"fleet": fleet, "domain": domain, **figures},
    )


def claim_held_back(unit: Unit, control: Mapping[str, Any]) -> CapReached | ScopePaused:
    """A named claim refused by a paused or capped scope."""
    fleet, domain = control["fleet"], control["domain"]
    scope = scope_name(fleet, domain)
    if control["paused"]:
        return ScopePaused(
            f"{scope} is paused ({control['pause_reason'] or 'no reason given'}), so unit "
            f"{unit.external_ref} is not claimed. Do not retry and do not claim in this "
            "scope: stop; an operator resumes it with POST /controls.",
            invariant="paused",
            unit_id=str(unit.id),
            state=unit.state,
            allowed=NEXT_ACTIONS[unit.state],
            extra={"fleet": fleet, "domain": domain, "pause_reason": control["pause_reason"]},
        )
    return CapReached(
        f"{scope} has {control['live']} live units and its cap is {control['max_live']}, so "
        f"unit {unit.external_ref} is not claimed. Do not retry now: stop, or claim in "
        "another scope; a slot frees when a live unit of the scope ends.",
        invariant="cap_reached",
        unit_id=str(unit.id),
        state=unit.state,
        allowed=NEXT_ACTIONS[unit.state],
        extra={
            "fleet": fleet,
            "domain": domain,
            "max_live": control["max_live"],
            "live": control["live"],
        },
    )


def key_held(unit: Unit, holder: Mapping[str, Any]) -> ExclusiveKeyHeld:
    return ExclusiveKeyHeld(
        f"unit {unit.external_ref} shares exclusion key {holder['key']!r} with unit "
        f"{holder['external_ref']} ({holder['state']}), which holds it now, so it is not "
        "claimed. Take another unit (claim without naming one); this one is claimable once "
        "that unit is no longer held.",
        invariant="exclusive_key_held",
        unit_id=str(unit.id),
        state=unit.state,
        allowed=NEXT_ACTIONS[unit.state],
        extra={"key": holder["key"], "unit": _other(holder)},
    )


def _other(holder: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(holder["id"]),
        "external_ref": holder["external_ref"],
        "state": holder["state"],
    }


def held_back_by(
    controls: list[Mapping[str, Any]],
    budget: Mapping[str, Any] | None,
    holders: list[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Why a ready unit is skipped by a claim now, one object per reason (DESIGN §13)."""
    reasons: list[dict[str, Any]] = []
    for c in controls:
        if c["paused"]:
            reasons.append(
                {
                    "kind": "paused",
                    "fleet": c["fleet"],
                    "domain": c["domain"],
                    "reason": c["pause_reason"],
                }
            )
        if c["max_live"] is not None and c["live"] >= c["max_live"]:
            reasons.append(
                {
                    "kind": "cap",
                    "fleet": c["fleet"],
                    "domain": c["domain"],
                    "max_live": c["max_live"],
                    "live": c["live"],
                }
            )
    if budget is not None:
        reasons.append(
            {
                "kind": "budget",
                "fleet": budget["fleet"],
                "domain": budget["domain"],
                "cap_cents": budget["cap_cents"],
                "spent_cents": budget["spent_cents"],
            }
        )
    for h in holders:
        reasons.append({"kind": "exclusive", "key": h["key"], "unit": _other(h)})
    return reasons
