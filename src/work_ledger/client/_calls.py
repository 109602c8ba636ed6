"""Every endpoint of the API as a `Call`: what to send and how to read the answer.

The sync and async clients only differ in how they send a `Call`; building the request,
the Idempotency-Key, the retry policy and parsing the answer live here, once.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

from work_ledger.client._endpoints import Endpoints
from work_ledger.client.errors import NothingToClaim, Unreachable, error_from_response
from work_ledger.client.models import (
    Asked,
    Claim,
    Event,
    NewUnit,
    Page,
    Question,
    Registration,
    Step,
    Unit,
    UnitDetail,
)

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:4001"
# The request header that names a sub-agent: the acting agent becomes `principal/suffix`.
AGENT_HEADER = "X-WL-Agent"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_WAIT_SECONDS = 60


def default_url() -> str:
    return os.environ.get("WL_URL") or DEFAULT_URL


def default_token() -> str | None:
    return os.environ.get("WL_TOKEN") or None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request: a write carries an Idempotency-Key that every retry repeats."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    wait_seconds: float = 0.0

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.key is None else {IDEMPOTENCY_HEADER: self.key}


def retryable(status: int, body: bytes) -> bool:
    """503 (database away) and a write still running under the same key are worth a retry."""
    return status == 503 or (status == 409 and b"idempotency_key_in_flight" in body)


def backoff_delay(retry: int, base: float) -> float:
    """Exponential backoff with jitter, capped at 5 seconds."""
    return float(min(5.0, base * 2**retry) * random.uniform(0.5, 1.0))


# -- sending: everything around the I/O, shared by the sync and async clients ------------


def headers(token: str | None, agent: str | None) -> dict[str, str]:
    """A client's default headers; `token` defaults to WL_TOKEN, `agent` names a sub-agent."""
    token = token or default_token()
    sent = {"Accept": "application/json"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    if agent:
        sent[AGENT_HEADER] = agent
    return sent


class Policy(Protocol):
    """What `Sending` reads off a client (at each call, so a changed setting counts)."""

    endpoints: Endpoints
    timeout: float
    retries: int
    backoff: float


class Sending(Generic[T]):
    """One call through its retries, without the I/O: what to send, what to make of it.

    The client loops: send `request`, then `answered(...)` says whether the answer is final
    (return `result(...)`), or `failed(exc)` raises on the last try; else sleep `delay()`.
    A connection error or a 503 moves the call to the client's next base URL at once; once
    every URL failed in a row, it backs off before the next round (`retries` rounds).
    """

    def __init__(self, call: Call[T], client: Policy) -> None:
        self.call, self.client = call, client
        self.tries = 0
        self.retry = 0  # back-off rounds so far
        self.moved = 0  # base URLs moved past since the last back-off
        self.url = client.endpoints.current
        self._failover = False

    @property
    def request(self) -> dict[str, Any]:
        call = self.call
        return {
            "method": call.method,
            "url": self.url + call.path,
            "json": call.json if call.method != "GET" else None,
            "params": call.params,
            "headers": call.headers,
            "timeout": self.client.timeout + call.wait_seconds,
        }

    def _last(self, failover: bool) -> bool:
        more_urls = failover and self.moved + 1 < len(self.client.endpoints)
        return self.retry == self.client.retries and not more_urls

    def answered(self, status: int, body: bytes) -> bool:
        """Whether this answer is final: a retryable one is retried until the last try."""
        self._failover = status == 503
        return not retryable(status, body) or self._last(self._failover)

    def result(self, status: int, body: bytes) -> T:
        """The parsed answer of a 2xx; the typed error the server raised otherwise."""
        if 200 <= status < 300:
            return self.call.parse(json.loads(body))
        raise error_from_response(status, body)

    def failed(self, exc: Exception) -> None:
        """A connection error: raise `Unreachable` on the last try, else retry."""
        self._failover = True
        if self._last(failover=True):
            raise Unreachable(
                f"cannot reach the work-ledger server at {self.client.endpoints} ({exc!r}) "
                f"after {self.tries + 1} tries; check that `work-ledger serve` runs there and "
                "that WL_URL points at it"
            ) from exc

    def delay(self) -> float:
        """How long to wait before the next try (and count it): none when moving on to
        another base URL, a back-off once every URL failed in a row."""
        self.tries += 1
        endpoints = self.client.endpoints
        if self._failover and len(endpoints) > 1:
            self.url = endpoints.failed(self.url)
            self.moved += 1
            if self.moved < len(endpoints):
                return 0.0  # another replica may answer right away
        delay = backoff_delay(self.retry, self.client.backoff)
        self.retry += 1
        self.moved = 0
        return delay


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


def register(units: Iterable[NewUnit | Mapping[str, Any]], key: str | None) -> Call[Registration]:
    body = {"units": [_new_unit(u) for u in units]}
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


def record_cost(attempt_id: str, cost_cents: int, key: str | None) -> Call[Step]:
    body = {"cost_cents": cost_cents}
    return _write(f"/attempts/{attempt_id}/cost", body, Step.from_json, key=key)


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


def health(path: str) -> Call[dict[str, Any]]:
    return _read(path, dict)
