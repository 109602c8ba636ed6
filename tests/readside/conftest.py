"""A known ledger for the read side: three domains, every state, every disposition, a
stale reclaim, a release, a block and its answer, costs, and one stalled unit.

    billing  b1 MIGRATED (1 attempt, 100c)   b2 MIGRATED (2 attempts: stale reclaim, 120c)
             b3 DROPPED from ready (0, 0c)   b4 ready
    orders   o1 DEAD (2 attempts: released failed, then blocked, answered; 50c)
             o2 DEFERRED from blocked (1, 40c, no evidence)
             o3 in_progress, heartbeat 10 minutes old: stalled (1, 10c)
             o4 claimed, fresh (1, 0c)
    search   s1 blocked, heartbeat 10 minutes old: not stalled (1, 15c)
             s2 verified (1, 25c)   s3 DEAD from ready (0, 0c, no evidence)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from work_ledger.domain.model import Actor, Disposition, NewUnit, Outcome
from work_ledger.readside.roles import grant_reader
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
LONG_LEASE = 3600


async def _work(ledger: Ledger, ref: str, agent: str, cost: int = 0) -> Actor:
    """Claim `ref` for `agent`, start it, record `cost`."""
    actor = Actor(agent)
    claim = await ledger.claim_named(ref, agent, lease_seconds=LONG_LEASE)
    assert claim.attempt is not None
    await ledger.start(ref, actor, attempt_id=claim.attempt.id)
    if cost:
        await ledger.record_cost(claim.attempt.id, cost, actor)
    return actor


async def _current_attempt(ledger: Ledger, ref: str) -> object:
    detail = await ledger.get_unit(ref)
    return detail.attempts[-1].id


async def seed_ledger(ledger: Ledger, raw: asyncpg.Connection) -> None:
    units = [
        NewUnit(ref, "fleet-a", domain)
        for domain, refs in (
            ("billing", ("b1", "b2", "b3", "b4")),
            ("orders", ("o1", "o2", "o3", "o4")),
            ("search", ("s1", "s2", "s3")),
        )
        for ref in refs
    ]
    await ledger.register(units, OPERATOR)

    agent = await _work(ledger, "b1", "agent-a", 100)
    await ledger.verify("b1", agent, "https://ci.example/b1")
    await ledger.dispose("b1", Disposition.MIGRATED, agent)

    await _work(ledger, "b2", "agent-b", 50)
    await raw.execute(
        "UPDATE work_units SET lease_expires_at = now() - interval '1 minute'"
        " WHERE external_ref = 'b2'"
    )
    agent = await _work(ledger, "b2", "agent-c", 70)  # the stale reclaim: attempt 2
    await ledger.verify("b2", agent, "https://ci.example/b2")
    await ledger.dispose(
        "b2", Disposition.MIGRATED, OPERATOR, evidence_url="https://review.example/b2"
    )

    await ledger.dispose(
        "b3", Disposition.DROPPED, OPERATOR, evidence_url="https://review.example/b3-dup"
    )

    agent = await _work(ledger, "o1", "agent-d", 30)
    await ledger.release("o1", agent, outcome=Outcome.FAILED)
    agent = await _work(ledger, "o1", "agent-d")
    await ledger.block("o1", agent, "which currency table?")
    await ledger.unblock("o1", "the v2 one", OPERATOR)
    await ledger.record_cost(await _current_attempt(ledger, "o1"), 20, agent)  # type: ignore[arg-type]
    await ledger.dispose("o1", Disposition.DEAD, OPERATOR, evidence_url="https://review.example/o1")

    agent = await _work(ledger, "o2", "agent-e", 40)
    await ledger.block("o2", agent, "is this still used?")
    await ledger.dispose("o2", Disposition.DEFERRED, OPERATOR)

    await _work(ledger, "o3", "agent-f", 10)
    await ledger.claim_named("o4", "agent-g", lease_seconds=LONG_LEASE)

    agent = await _work(ledger, "s1", "agent-h", 15)
    await ledger.block("s1", agent, "owner?")
    agent = await _work(ledger, "s2", "agent-i", 25)
    await ledger.verify("s2", agent, "https://ci.example/s2")
    await ledger.dispose("s3", Disposition.DEAD, OPERATOR)

    # Two agents went quiet ten minutes ago: o3 (leased, so stalled) and s1 (blocked, so not).
    await raw.execute(
        "UPDATE work_units SET last_heartbeat_at = now() - interval '10 minutes'"
        " WHERE external_ref IN ('o3', 's1')"
    )
    assert await ledger.audit() == []


@pytest.fixture
async def seeded(ledger: Ledger, raw: asyncpg.Connection) -> Ledger:
    """The ledger of this module's docstring, audited clean."""
    await seed_ledger(ledger, raw)
    return ledger


def as_role(url: str, role: str, password: str) -> str:
    """The same database URL, logging in as `role`."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


@pytest.fixture
async def reader_url(database_url: str, raw: asyncpg.Connection) -> AsyncIterator[str]:
    """A URL of this test's database as a fresh role made by grant-reader."""
    role = f"wl_reader_{uuid.uuid4().hex[:10]}"
    await grant_reader(raw, role, "reader-secret")
    yield as_role(database_url, role, "reader-secret")
    await raw.execute(f'DROP OWNED BY "{role}"')
    await raw.execute(f'DROP ROLE "{role}"')


@pytest.fixture
async def reader(reader_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the read-only role."""
    conn = await asyncpg.connect(reader_url)
    yield conn
    await conn.close()
