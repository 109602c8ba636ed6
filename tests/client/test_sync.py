"""The sync SDK against a real running server."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from support.lease_history import HEARTBEAT_FRACTION, LEASE_SECONDS, renewals_in_time, sleep_past
from support.wl_server import settings_for, start
from work_ledger.client import Client, NothingToClaim, Unreachable
from work_ledger.db.connect import connect
from work_ledger.errors import AttemptSuperseded, InvariantViolation, NotHolder

EVIDENCE = "https://ci.example/runs/42"


class DropOnce(httpx.BaseTransport):
    """Sends each request for real, but loses the first answer to a path ending in `suffix`."""

    def __init__(self, *suffixes: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.pending = set(suffixes)
        self.seen: list[tuple[str, str | None, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        key = request.headers.get("idempotency-key")
        self.seen.append((request.url.path, key, response.headers.get("idempotent-replayed")))
        for suffix in list(self.pending):
            if request.url.path.endswith(suffix):
                self.pending.discard(suffix)
                response.close()
                raise httpx.ReadError("connection dropped after sending", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_client_drives_whole_life(operator: Client, agent: Client) -> None:
    """register, claim, start, cost, block, answer, verify, dispose MIGRATED."""
    registered = operator.register([{"external_ref": "orders/1", "fleet": "f", "domain": "orders"}])
    assert (registered.created, registered.existing) == (1, 0)
    with agent.claim(domain="orders") as work:
        assert work.unit.state == "in_progress"
        work.cost(120)
        question = work.block("which currency?")
        operator.unblock("orders/1", "EUR")
        answered = work.wait_for_answer(question.id, timeout=5)
        assert (answered.status, answered.answer, work.unit.state) == (
            "answered",
            "EUR",
            "in_progress",
        )
        work.verify(EVIDENCE)
        work.dispose("MIGRATED")
    detail = operator.get_unit("orders/1")
    assert (detail.unit.state, detail.unit.disposition, detail.unit.cost_cents) == (
        "done",
        "MIGRATED",
        120,
    )
    assert detail.unit.evidence_urls == [EVIDENCE]
    assert [a.outcome for a in detail.attempts] == ["verified"]


def test_claim_heartbeat_keeps_short_lease_alive(
    operator: Client, make_client: Callable[..., Client]
) -> None:
    """A short lease outlives its first expiry: the background heartbeat renewed it each
    time before it ran out (read from the events), so no rival could claim the unit."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    first, second = make_client("agent", "a1"), make_client("agent", "a2")
    with first.claim(lease_seconds=LEASE_SECONDS, heartbeat_fraction=HEARTBEAT_FRACTION) as work:
        expiry = work.unit.lease_expires_at
        assert expiry is not None
        sleep_past(expiry)
        assert second.claim_next().unit is None
        work.verify(EVIDENCE)
    assert renewals_in_time(operator, "u1", expiry) >= 1
    assert operator.get_unit("u1").unit.attempt_count == 1


def test_claim_exception_releases_unit_failed(operator: Client, agent: Client) -> None:
    """An exception inside the block releases the unit with outcome failed, then propagates."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    with pytest.raises(RuntimeError, match="tool crashed"), agent.claim():
        raise RuntimeError("tool crashed")
    detail = operator.get_unit("u1")
    assert (detail.unit.state, detail.attempts[0].outcome) == ("ready", "failed")


def test_claim_nothing_claimable_raises(agent: Client) -> None:
    """An empty ledger: claim raises NothingToClaim."""
    with pytest.raises(NothingToClaim):
        agent.claim_work()


def test_claim_lost_surfaces_superseded(
    operator: Client, make_client: Callable[..., Client]
) -> None:
    """A lapsed lease reclaimed by another agent: the next write raises, nothing is released."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    slow, other = make_client("agent", "slow"), make_client("agent", "other")
    work = slow.claim_work(lease_seconds=1, heartbeat_fraction=30)
    time.sleep(1.5)
    assert other.claim_next().unit is not None
    with pytest.raises(AttemptSuperseded) as refused, work:
        work.verify(EVIDENCE)
    assert refused.value.invariant == "attempt_superseded"
    detail = operator.get_unit("u1")
    assert (detail.unit.claimed_by, detail.unit.state) == ("other", "claimed")


def test_heartbeat_thread_marks_lost_claim(
    operator: Client, make_client: Callable[..., Client]
) -> None:
    """The background heartbeat finds the claim lost and stops; exiting the block raises it."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    slow, other = make_client("agent", "slow"), make_client("agent", "other")
    work = slow.claim_work(lease_seconds=1, heartbeat_fraction=2.5)
    time.sleep(1.3)
    assert other.claim_next().unit is not None
    work.start_heartbeat()  # only now: a beat before the rival's claim would renew the lease
    deadline = time.monotonic() + 30
    while work.lost is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert isinstance(work.lost, AttemptSuperseded)
    with pytest.raises(AttemptSuperseded):
        work.__exit__(None, None, None)


def test_retry_after_dropped_claim_does_not_claim_twice(
    operator: Client, ledger_server: object
) -> None:
    """A claim whose answer is lost is retried with its key: the same unit, one attempt."""
    operator.register([{"external_ref": f"u{i}", "fleet": "f"} for i in range(3)])
    drop = DropOnce("/units/claim", "/cost")
    url, token = operator.url, ledger_server.token("agent", "agent-1")  # type: ignore[attr-defined]
    with Client(url, token, transport=drop, backoff=0.01) as flaky:
        got = flaky.claim_next()
        assert got.unit is not None
        assert got.attempt is not None
        flaky.record_cost(got.attempt.id, 250)
    claims = [s for s in drop.seen if s[0] == "/units/claim"]
    assert len(claims) == 2
    assert claims[0][1] == claims[1][1]
    assert claims[1][2] == "true"
    claimed = operator.list_units(state="claimed").items
    assert [u.external_ref for u in claimed] == [got.unit.external_ref]
    assert operator.get_unit(got.unit.id).unit.cost_cents == 250


def test_problem_becomes_typed_error(operator: Client, agent: Client) -> None:
    """A 409 comes back as InvariantViolation with the invariant, state and allowed steps."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    with pytest.raises(InvariantViolation) as refused:
        operator.verify("u1", EVIDENCE)
    assert refused.value.invariant == "unit_state_transition_allowed"
    assert refused.value.state == "ready"
    assert "claim" in refused.value.allowed
    with pytest.raises(NotHolder):
        agent.start("u1")


def test_sub_agent_header_names_acting_agent(
    operator: Client, make_client: Callable[..., Client]
) -> None:
    """`agent=` narrows the acting id to principal/suffix."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    sub = make_client("agent", "agent-1", agent="agent-1/worker-3")
    got = sub.claim_next()
    assert got.unit is not None
    assert got.unit.claimed_by == "agent-1/worker-3"


def test_unreachable_server_raises_after_retries() -> None:
    """Nobody listening: Unreachable after the retries, naming the URL."""
    with (
        Client("http://127.0.0.1:9", "t", retries=2, backoff=0.01) as client,
        pytest.raises(Unreachable, match=r"127\.0\.0\.1:9"),
    ):
        client.claim_next()


class Watched(httpx.BaseTransport):
    """Sends every request for real; notes each write's key and status, and when one was
    answered 503."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.writes: list[tuple[str | None, int]] = []
        self.answered_503 = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST":
            response.read()
            self.writes.append((request.headers.get("idempotency-key"), response.status_code))
            if response.status_code == 503:
                assert response.json()["code"] == "unavailable", response.text
                self.answered_503.set()
        return response

    def close(self) -> None:
        self.inner.close()


def _hold_units_table(database_url: str, locked: threading.Event, until: threading.Event) -> None:
    """Lock work_units against every statement until `until` is set (a stuck database)."""

    async def hold() -> None:
        conn = await connect(database_url)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE work_units IN ACCESS EXCLUSIVE MODE")
                locked.set()
                await asyncio.to_thread(until.wait, 60)
        finally:
            await conn.close()

    asyncio.run(hold())


def test_retry_after_503_reuses_key_and_acts_once(
    operator: Client, database_url: str, tmp_path: Path
) -> None:
    """The server's own 503 (its statement timed out on a locked table) is retried with the
    same Idempotency-Key once the table is free; the cost is charged once."""
    operator.register([{"external_ref": "u1", "fleet": "f"}])
    settings = dataclasses.replace(
        settings_for(database_url, tmp_path / "stuck"), statement_timeout=1.0
    )
    server = start(settings)
    locked, transport = threading.Event(), Watched()
    holder = threading.Thread(
        target=_hold_units_table, args=(database_url, locked, transport.answered_503)
    )
    token = server.token("agent", "agent-1")
    try:
        with Client(server.url, token) as agent:
            attempt = agent.claim_next().attempt
        assert attempt is not None
        holder.start()
        assert locked.wait(60)
        with Client(server.url, token, transport=transport, backoff=0.01, retries=8) as flaky:
            flaky.record_cost(attempt.id, 250)
    finally:
        transport.answered_503.set()
        if holder.is_alive():
            holder.join(60)
        server.stop()
    assert (transport.writes[0][1], transport.writes[-1][1]) == (503, 200), transport.writes
    assert len({key for key, _ in transport.writes}) == 1
    events = operator.list_events("u1", limit=500).items
    assert [e.cost_delta_cents for e in events if e.event_type == "cost_recorded"] == [250]
    assert operator.get_unit("u1").unit.cost_cents == 250
