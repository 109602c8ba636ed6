"""Splits under races: two splits of one unit, or a split and a stale reclaim, with real
connections: one wins, and nothing of the loser is written."""

from __future__ import annotations

import asyncio

import asyncpg

from support.racing import racing_ledgers
from work_ledger.domain.model import Actor, NewUnit, State
from work_ledger.errors import WorkLedgerError
from work_ledger.service.shape import NewChild

OPERATOR = Actor("operator", privileged=True)
ROUNDS = 15


async def _children(raw: asyncpg.Connection, prefix: str) -> int:
    count: int = await raw.fetchval(
        "SELECT count(*) FROM work_units WHERE external_ref LIKE $1", f"{prefix}/%"
    )
    return count


async def test_two_concurrent_splits_one_wins(database_url: str, raw: asyncpg.Connection) -> None:
    """The holder and an operator split one unit at once: one split is written whole."""
    async with racing_ledgers(database_url, 2) as (first, second):
        for round_no in range(ROUNDS):
            ref, agent = f"big-{round_no}", Actor(f"agent-{round_no}")
            await first.register([NewUnit(ref, "f")], OPERATOR)
            await first.claim_named(ref, agent.name)
            await first.start(ref, agent)
            results = await asyncio.gather(
                first.split(ref, [NewChild(f"{ref}/a/1"), NewChild(f"{ref}/a/2")], agent),
                second.split(ref, [NewChild(f"{ref}/b/1")], OPERATOR),
                return_exceptions=True,
            )
            won = [r for r in results if not isinstance(r, BaseException)]
            assert len(won) == 1, results
            assert all(isinstance(r, WorkLedgerError) for r in results if r not in won)
            winner = "a" if results[0] in won else "b"
            loser = "b" if winner == "a" else "a"
            assert await _children(raw, f"{ref}/{loser}") == 0
            assert await _children(raw, f"{ref}/{winner}") == len(won[0].children)
            shown = await first.get_unit(ref)
            assert shown.unit.state is State.WAITING
            assert shown.unit.unfinished_prerequisites == len(won[0].children)
        assert await first.audit() == []


async def test_split_racing_a_stale_reclaim_one_wins(
    database_url: str, raw: asyncpg.Connection
) -> None:
    """A holder whose lease lapsed splits while another agent reclaims: either the split
    is whole (the reclaim gets nothing) or the reclaim holds it (no child exists)."""
    outcomes = set()
    async with racing_ledgers(database_url, 2) as (holder_ledger, other_ledger):
        for round_no in range(ROUNDS):
            ref, agent = f"lapse-{round_no}", Actor(f"holder-{round_no}")
            await holder_ledger.register([NewUnit(ref, "f", f"lapsing-{round_no}")], OPERATOR)
            await holder_ledger.claim_named(ref, agent.name)
            await holder_ledger.start(ref, agent)
            await raw.execute(
                "UPDATE work_units SET lease_expires_at = now() - interval '1 second'"
                " WHERE external_ref = $1",
                ref,
            )
            split, claim = await asyncio.gather(
                holder_ledger.split(ref, [NewChild(f"{ref}/c")], agent),
                other_ledger.claim(f"other-{round_no}", domain=f"lapsing-{round_no}"),
                return_exceptions=True,
            )
            children = await _children(raw, ref)
            if isinstance(split, BaseException):
                assert isinstance(split, WorkLedgerError)
                assert claim.unit is not None  # type: ignore[union-attr]
                assert children == 0
                outcomes.add("reclaimed")
            else:
                assert not isinstance(claim, BaseException)
                assert claim.unit is None or claim.unit.external_ref == f"{ref}/c"
                assert children == 1
                outcomes.add("split")
            if not isinstance(claim, BaseException) and claim.unit is not None:
                await other_ledger.release(claim.unit.external_ref, Actor(f"other-{round_no}"))
        assert await holder_ledger.audit() == []
    assert outcomes  # at least one way won; which one is up to the race
