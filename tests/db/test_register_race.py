"""Two batches that create (or name) the same new prerequisite at once: both succeed.

The race (issue 28): batch B's statement reads the ledger before batch A commits unit P,
so B counts P as a prerequisite of its own batch; its insert of P then waits for A and does
nothing (P is A's now), and B's dependent was left counting one prerequisite with no
requirement row behind it: a 409 `unit_prerequisites_counted` at commit, though a retry of
the same batch succeeded. Now the statement notices the unit it could neither insert nor
see, refuses itself whole, and the service runs it again, which sees P.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.errors import Unavailable
from work_ledger.service import shape
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
BATCHES = 6
ROUNDS = 40

_STRANDED_OR_MISCOUNTED = """
SELECT count(*) FROM work_units AS u
WHERE u.unfinished_prerequisites <> (
        SELECT count(*) FROM unit_requirements AS e JOIN work_units AS p ON p.id = e.prerequisite_id
        WHERE e.unit_id = u.id AND e.waived_at IS NULL
          AND NOT wl_is_finished(p.state, p.disposition))
   OR (u.state = 'waiting' AND u.unfinished_prerequisites = 0)
"""


@pytest.fixture
async def ledgers(database_url: str) -> AsyncIterator[list[Ledger]]:
    """One ledger per batch, each on a pool of its own: real concurrent connections."""
    pools = [await create_pool(database_url, min_size=1, max_size=1) for _ in range(BATCHES)]
    yield [Ledger(Store(p), lease_seconds=60) for p in pools]
    await asyncio.gather(*(p.close() for p in pools))


async def test_a_batch_waiting_on_another_for_its_new_prerequisite_succeeds(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Deterministic: P inserted by an open transaction; a batch [P, D requires P] waits for
    it, then registers D waiting on that P (the requirement row is there), first time."""
    tx = raw.transaction()
    await tx.start()
    await raw.execute("INSERT INTO work_units (external_ref, fleet, domain) VALUES ('p', 'f', 'd')")
    batch = asyncio.create_task(
        ledger.register(
            [NewUnit("p", "f", "d"), NewUnit("dep", "f", "d", requires=("p",))], OPERATOR
        )
    )
    await asyncio.sleep(0.3)
    assert not batch.done()  # its insert of p waits for the open transaction
    await tx.commit()
    registered = await batch
    assert [(r.external_ref, r.created) for r in registered] == [("p", False), ("dep", True)]
    p_id = await raw.fetchval("SELECT id FROM work_units WHERE external_ref = 'p'")
    assert registered[0].id == p_id
    dep = await raw.fetchrow(
        "SELECT state, unfinished_prerequisites FROM work_units WHERE external_ref = 'dep'"
    )
    assert (dep["state"], dep["unfinished_prerequisites"]) == ("waiting", 1)
    assert (
        await raw.fetchval(
            "SELECT count(*) FROM unit_requirements AS e JOIN work_units AS u ON u.id = e.unit_id"
            " WHERE u.external_ref = 'dep' AND e.prerequisite_id = $1",
            p_id,
        )
        == 1
    )
    assert await raw.fetchval(_STRANDED_OR_MISCOUNTED) == 0


async def test_concurrent_batches_sharing_new_prerequisites_all_succeed(
    ledgers: list[Ledger], raw: asyncpg.Connection
) -> None:
    """Many rounds: each round, six batches on six connections at once create the same new
    prerequisites (a chain, and a diamond's top) and each its own dependents. Every batch
    succeeds the first time, every dependent requires the shared units, none miscounted;
    then finishing the shared units releases every dependent."""
    for r in range(ROUNDS):
        top, mid = f"r{r}/top", f"r{r}/mid"

        def batch(n: int, top: str = top, mid: str = mid, r: int = r) -> list[NewUnit]:
            shared = [NewUnit(top, "f", "libs"), NewUnit(mid, "f", "libs", requires=(top,))]
            own = [
                NewUnit(f"r{r}/b{n}/left", "f", "svc", requires=(top,)),
                NewUnit(f"r{r}/b{n}/right", "f", "svc", requires=(mid,)),
                NewUnit(f"r{r}/b{n}/bottom", "f", "svc", requires=(f"r{r}/b{n}/left", mid)),
            ]
            return shared[n % 2 :] + own + shared[: n % 2]  # the shared units first or last

        results = await asyncio.gather(
            *(ledgers[n].register(batch(n), OPERATOR) for n in range(BATCHES)),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, BaseException)]
        assert refused == [], f"round {r}: {refused[0]!r}"
        created_top = sum(
            1
            for res in results
            for u in res
            if u.external_ref == top and u.created  # type: ignore[union-attr]
        )
        assert created_top == 1  # one batch created it, the others found it
        assert await raw.fetchval(_STRANDED_OR_MISCOUNTED) == 0, f"round {r}"
        edges = await raw.fetchval(
            "SELECT count(*) FROM unit_requirements AS e"
            " JOIN work_units AS p ON p.id = e.prerequisite_id WHERE p.external_ref = ANY($1)",
            [top, mid],
        )
        assert edges == 1 + 3 * BATCHES  # mid→top, and left, right, bottom of each batch
    for ref in (f"r{r}/top" for r in range(ROUNDS)):
        await ledgers[0].dispose(ref, Disposition.DROPPED, OPERATOR)
    for ref in (f"r{r}/mid" for r in range(ROUNDS)):
        await ledgers[0].dispose(ref, Disposition.DROPPED, OPERATOR)
    waiting = await raw.fetchval(
        "SELECT count(*) FROM work_units"
        " WHERE state = 'waiting' AND external_ref NOT LIKE '%bottom'"
    )
    assert waiting == 0
    assert await raw.fetchval(_STRANDED_OR_MISCOUNTED) == 0
    assert await ledgers[0].audit() == []


async def test_a_batch_that_keeps_losing_the_race_is_a_503_with_nothing_written(
    ledger: Ledger, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of runs (one here), the batch is a 503 (not a 409, which a key would keep and
    replay): nothing of it is written, and the same request again succeeds."""
    monkeypatch.setattr(shape, "RACED_TRIES", 1)
    tx = raw.transaction()
    await tx.start()
    await raw.execute("INSERT INTO work_units (external_ref, fleet, domain) VALUES ('p', 'f', 'd')")
    batch = [NewUnit("p", "f", "d"), NewUnit("dep", "f", "d", requires=("p",))]
    attempt = asyncio.create_task(ledger.register(batch, OPERATOR))
    await asyncio.sleep(0.3)
    await tx.commit()
    with pytest.raises(Unavailable, match="lost that race 1 times"):
        await attempt
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE external_ref = 'dep'") == 0
    again = await ledger.register(batch, OPERATOR)
    assert [(r.external_ref, r.created) for r in again] == [("p", False), ("dep", True)]
