"""Every endpoint of the API as a `Call`: what to send and how to read the answer.

The sync and async clients only differ in how they send a `Call` (`_sending.py` holds the
retry policy); building the request, the Idempotency-Key and parsing the answer live here,
once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from work_ledger.client._sending import Call
from work_ledger.client.errors import NothingToClaim
from work_ledger.client.flow import Control, ControlEvent
from work_ledger.client.models import (
    Asked,
    BulkResult,
    Claim,
    Event,
    NewChild,
    NewUnit,
    Page,
    Question,
    Registration,
    Split,
    Step,
    Unit,
    UnitDetail,
)
from work_ledger.client.money import Budget, CostRecord

T = TypeVar("T")


def claimed(got: Claim, domain: str | None) -> Claim:
    """The claim, or `NothingToClaim` when it came back empty."""
    if got.unit is None or got.attempt is None:
        where = f" in domain {domain!r}" if domain else ""
        raise NothingToClaim(f"no unit is claimable{where} right now; try again later")
    return got


def _ref(unit: str) -> str:
    return quote(str(unit), safe="")


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _write(path: str, body: Mapping[str, Any], parse: Callable[[Any], T], **kw: Any) -> Call[T]:
    key = kw.pop("key", None) or str(uuid.uuid4())
    return Call("POST", path, parse, json=_drop_none(body), key=key, **kw)


def _read(path: str, parse: Callable[[Any], T], **params: Any) -> Call[T]:
    wait = float(params.get("wait_seconds") or 0)
    return Call("GET", path, parse, params=_drop_none(params), wait_seconds=wait)


def _page(parse_item: Callable[[Any], T]) -> Callable[[Any], Page[T]]:
    def parse(data: Any) -> Page[T]:
        return Page([parse_item(i) for i in data["items"]], data.get("next_cursor"))

    return parse


def _new_unit(unit: NewUnit | Mapping[str, Any]) -> dict[str, Any]:
    return unit.to_json() if isinstance(unit, NewUnit) else _drop_none(unit)


# -- writes ----------------------------------------------------------------------------


def register(
    units: Iterable[NewUnit | Mapping[str, Any]],
    requires: Iterable[str],
    max_attempts: int | None,
    key: str | None,
) -> Call[Registration]:
    """The batch's `requires` and `max_attempts` fill each unit that names none of its own."""
    defaults: dict[str, Any] = {"requires": list(requires), "max_attempts": max_attempts}
    defaults = {k: v for k, v in defaults.items() if v}
    body = {"units": [{**defaults, **_new_unit(u)} for u in units]}
    return _write("/units", body, Registration.from_json, key=key)


def claim_next(
    domain: str | None, lease_seconds: int | None, wait_seconds: int | None, key: str | None
) -> Call[Claim]:
    body = {"domain": domain, "lease_seconds": lease_seconds, "wait_seconds": wait_seconds}
    return _write(
        "/units/claim", body, Claim.from_json, key=key, wait_seconds=float(wait_seconds or 0)
    )


def claim_unit(unit: str, lease_seconds: int | None, key: str | None) -> Call[Claim]:
    body = {"lease_seconds": lease_seconds}
    return _write(f"/units/{_ref(unit)}/claim", body, Claim.from_json, key=key)


def heartbeat(attempt_id: str, lease_seconds: int | None, key: str | None) -> Call[Step]:
    body = {"lease_seconds": lease_seconds}
    return _write(f"/attempts/{attempt_id}/heartbeat", body, Step.from_json, key=key)


def record_cost(attempt_id: str, record: CostRecord, key: str | None) -> Call[Step]:
    return _write(f"/attempts/{attempt_id}/cost", record.to_json(), Step.from_json, key=key)


def transition(
    unit: str,
    to: str,
    *,
    attempt_id: str | None = None,
    evidence_url: str | None = None,
    reason: str | None = None,
    outcome: str | None = None,
    key: str | None = None,
) -> Call[Step]:
    body = {
        "to": to,
        "attempt_id": attempt_id,
        "evidence_url": evidence_url,
        "reason": reason,
        "outcome": outcome,
    }
    return _write(f"/units/{_ref(unit)}/transition", body, Step.from_json, key=key)


def start(unit: str, attempt_id: str | None, key: str | None) -> Call[Step]:
    return transition(unit, "in_progress", attempt_id=attempt_id, key=key)


def verify(
    unit: str, evidence_url: str, attempt_id: str | None, reason: str | None, key: str | None
) -> Call[Step]:
    return transition(
        unit, "verified", attempt_id=attempt_id, evidence_url=evidence_url, reason=reason, key=key
    )


def release(
    unit: str, outcome: str, reason: str | None, attempt_id: str | None, key: str | None
) -> Call[Step]:
    return transition(unit, "ready", attempt_id=attempt_id, outcome=outcome, reason=reason, key=key)


def claim(
    domain: str | None, unit: str | None, lease_seconds: int | None, wait_seconds: int | None
) -> Call[Claim]:
    """The claim of the named `unit`, else of the next claimable one (in `domain`)."""
    if unit is not None:
        return claim_unit(unit, lease_seconds, None)
    return claim_next(domain, lease_seconds, wait_seconds, None)


def block(
    unit: str,
    question: str,
    assignee_group_slug: str | None,
    attempt_id: str | None,
    key: str | None,
) -> Call[Asked]:
    body = {
        "question": question,
        "assignee_group_slug": assignee_group_slug,
        "attempt_id": attempt_id,
    }
    return _write(f"/units/{_ref(unit)}/block", body, Asked.from_json, key=key)


def unblock(unit: str, answer: str, question_id: str | None, key: str | None) -> Call[Asked]:
    body = {"answer": answer, "question_id": question_id}
    return _write(f"/units/{_ref(unit)}/unblock", body, Asked.from_json, key=key)


def dispose(
    unit: str,
    disposition: str,
    evidence_url: str | None,
    reason: str | None,
    attempt_id: str | None,
    key: str | None,
) -> Call[Unit]:
    body = {
        "disposition": disposition,
        "evidence_url": evidence_url,
        "reason": reason,
        "attempt_id": attempt_id,
    }
    return _write(
        f"/units/{_ref(unit)}/dispose", body, lambda d: Unit.from_json(d["unit"]), key=key
    )


def _new_child(child: NewChild | Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(child, str):
        return {"external_ref": child}
    return child.to_json() if isinstance(child, NewChild) else _drop_none(child)


def split(
    unit: str,
    children: Iterable[NewChild | Mapping[str, Any] | str],
    reason: str | None,
    attempt_id: str | None,
    key: str | None,
) -> Call[Split]:
    body = {
        "units": [_new_child(c) for c in children],
        "reason": reason,
        "attempt_id": attempt_id,
    }
    return _write(f"/units/{_ref(unit)}/split", body, Split.from_json, key=key)


def waive(unit: str, prerequisite: str, reason: str | None, key: str | None) -> Call[Unit]:
    body = {"prerequisite": prerequisite, "reason": reason}
    return _write(f"/units/{_ref(unit)}/waive", body, lambda d: Unit.from_json(d["unit"]), key=key)


def set_budget(fleet: str, cap_cents: int, domain: str | None, key: str | None) -> Call[Budget]:
    body = {"fleet": fleet, "domain": domain, "cap_cents": cap_cents}
    return _write("/budgets", body, Budget.from_json, key=key)


def bulk(
    action: str,
    where: Mapping[str, Any],
    reason: str,
    disposition: str | None,
    dry_run: bool,
    limit: int | None,
    key: str | None,
) -> Call[BulkResult]:
    body = {
        "filter": _drop_none(where),
        "action": action,
        "disposition": disposition,
        "reason": reason,
        "dry_run": dry_run,
        "limit": limit,
    }
    return _write("/units/bulk", body, BulkResult.from_json, key=key)


# A control left out of a change: it stays as it is (None would remove a cap or a gate).
UNCHANGED: Any = object()


def set_controls(
    fleet: str,
    reason: str,
    *,
    domain: str | None,
    max_live: Any,
    paused: bool | None,
    gate: Any,
    force: bool,
    key: str | None,
) -> Call[Control]:
    body: dict[str, Any] = {"fleet": fleet, "reason": reason}
    if domain is not None:
        body["domain"] = domain
    if max_live is not UNCHANGED:
        body["max_live"] = max_live
    if paused is not None:
        body["paused"] = paused
    if gate is not UNCHANGED:
        body["gate"] = gate
    if force:
        body["force"] = True
    return Call("POST", "/controls", Control.from_json, json=body, key=key or str(uuid.uuid4()))


def controls() -> Call[list[Control]]:
    return _read("/controls", lambda d: [Control.from_json(c) for c in d["items"]])


def control_events(limit: int | None, cursor: str | None) -> Call[Page[ControlEvent]]:
    return _read(
        "/controls/events",
        lambda d: Page([ControlEvent.from_json(e) for e in d["items"]], d.get("next_cursor")),
        limit=limit,
        cursor=cursor,
    )


def cancel_question(question_id: str, reason: str | None, key: str | None) -> Call[Question]:
    return _write(
        f"/questions/{question_id}/cancel", {"reason": reason}, Question.from_json, key=key
    )


def route_question(question_id: str, external_task_id: str, key: str | None) -> Call[Question]:
    body = {"external_task_id": external_task_id}
    return _write(f"/questions/{question_id}/route", body, Question.from_json, key=key)


def project_events(events: list[Mapping[str, Any]], key: str | None) -> Call[dict[str, Any]]:
    return _write("/projection/events", {"events": list(events)}, dict, key=key)


# -- reads -----------------------------------------------------------------------------


def get_unit(unit: str) -> Call[UnitDetail]:
    return _read(f"/units/{_ref(unit)}", UnitDetail.from_json)


def list_units(**query: Any) -> Call[Page[Unit]]:
    return _read("/units", _page(Unit.from_json), **query)


def list_events(unit: str | None, limit: int | None, cursor: str | None) -> Call[Page[Event]]:
    path = "/events" if unit is None else f"/units/{_ref(unit)}/events"
    return _read(path, _page(Event.from_json), limit=limit, cursor=cursor)


def list_questions(**query: Any) -> Call[Page[Question]]:
    return _read("/questions", _page(Question.from_json), **query)


def unrouted_questions(
    assignee_group_slug: str | None, limit: int | None, wait_seconds: int | None
) -> Call[Page[Question]]:
    """Open questions not yet routed to the human queue, oldest first (triage's to-do)."""
    return list_questions(
        status="open",
        routed=False,
        assignee_group_slug=assignee_group_slug,
        limit=limit,
        wait_seconds=wait_seconds,
    )


def get_question(question_id: str, wait_seconds: int | None) -> Call[Question]:
    return _read(f"/questions/{question_id}", Question.from_json, wait_seconds=wait_seconds)


def budgets() -> Call[list[Budget]]:
    return _read("/budgets", lambda d: [Budget.from_json(b) for b in d["items"]])


def health(path: str) -> Call[dict[str, Any]]:
    return _read(path, dict)
