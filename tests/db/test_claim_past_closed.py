"""Pull-next skips a closed scope without reading its units (migrations 0028, 0029).

A paused, capped or spent scope ahead in the queue costs a claim one probe per scope, not
a read of every ready unit it holds. Counted with PostgreSQL's own per-transaction
statistics: the entries that the claim's index scans of work_units returned in its
transaction (pg_stat_get_xact_tuples_returned of each index), whichever statement or
function ran them.
"""

from __future__ import annotations

import asyncpg
import pytest

from work_ledger.db.queries import QUERIES

AHEAD = 2_000  # ready units of closed scopes, registered before the open ones


async def _seed(raw: asyncpg.Connection, closing: str, opened: int = 3) -> None:
    """AHEAD units of fleet `closed` (domain `orders`), then `opened` of fleet `open`, and
    what closes `closed`: a pause, a cap it has reached, or a spent budget."""
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, domain, created_at)"
        " SELECT 'closed-' || g, 'closed', 'orders', now() - interval '1 day' + g * interval '1 ms'"
        " FROM generate_series(1, $1) AS g",
        AHEAD,
    )
    await raw.execute(
        "INSERT INTO work_units (external_ref, fleet, domain)"
        " SELECT 'open-' || g, 'open', 'orders' FROM generate_series(1, $1) AS g",
        opened,
    )
    if closing == "paused":
        await raw.execute(
            "INSERT INTO controls (fleet, paused, paused_since, pause_reason, reason, updated_by)"
            " VALUES ('closed', true, now(), 'weekend', 'weekend', 'op')"
        )
    elif closing == "capped":
        await raw.execute(
            "INSERT INTO controls (fleet, max_live, reason, updated_by)"
            " VALUES ('closed', 0, 'ramp', 'op')"
        )
    else:
        await raw.execute(
            "INSERT INTO budgets (fleet, cap_cents, updated_by) VALUES ('closed', 0, 'op')"
        )
    # A pause marks the units it holds (0032): their unmarked versions stay in the queue's
    # index, dead, until a scan or VACUUM removes them. The steady state is measured.
    await raw.execute("VACUUM ANALYZE work_units")


READ = (
    "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))::int FROM pg_index"
    " WHERE indrelid = 'work_units'::regclass"
)


class _RolledBack(Exception):
    pass


async def _claim_reads(
    raw: asyncpg.Connection, statement: str, domain: str | None, *, keep: bool = True
) -> tuple[str, int]:
    """(external_ref claimed, entries its index scans of work_units returned) for one
    claim, committed or (`keep=False`) rolled back."""
    args = (domain, 60) if statement == "claim_next_unit" else (domain, 60, None)
    try:
        async with raw.transaction():
            # The counts not yet reported include earlier transactions': a difference.
            before = await raw.fetchval(READ)
            row = await raw.fetchrow(QUERIES[statement], "agent-1", *args)
            read = await raw.fetchval(READ) - before
            if not keep:
                raise _RolledBack
    except _RolledBack:
        pass
    assert row is not None
    assert row["unit"] is not None, "nothing was claimed"
    return row["unit"]["external_ref"], read


@pytest.mark.parametrize("closing", ["paused", "capped", "spent"])
@pytest.mark.parametrize("domain", [None, "orders"])
@pytest.mark.parametrize("statement", ["claim_next_unit", "claim_unit"])
async def test_a_claim_past_a_closed_scope_reads_its_scopes_not_their_units(
    raw: asyncpg.Connection, closing: str, domain: str | None, statement: str
) -> None:
    await _seed(raw, closing)
    claimed, read = await _claim_reads(raw, statement, domain)
    assert claimed == "open-1", "the oldest unit of the open scope is claimed"
    assert read < 50, (
        f"a claim past {AHEAD} units of a {closing} scope read {read} index entries: "
        "it read the closed scope's units"
    )


@pytest.mark.parametrize("domain", [None, "orders"])
@pytest.mark.parametrize("statement", ["claim_next_unit", "claim_unit"])
async def test_a_claim_past_a_closed_scope_reads_its_scopes_when_units_carry_keys(
    raw: asyncpg.Connection, domain: str | None, statement: str
) -> None:
    """Behind a few closed units, a big open scope whose units carry exclusion keys: the
    planner guesses that the key test passes half of them, and an ordered walk of the whole
    ready queue (through the closed units) looks as cheap as the open scope's own index.
    The scan is bounded below by the scope's head. Ten claims on one connection, so that
    PL/pgSQL's cached generic plan runs too."""
    await _seed(raw, "paused", opened=20_000)
    await raw.execute(
        "UPDATE work_units SET exclusive = ARRAY['module-' || external_ref] WHERE fleet = 'open';"
        " ANALYZE work_units"
    )
    for run in range(10):
        claimed, read = await _claim_reads(raw, statement, domain, keep=False)
        assert claimed == "open-1"
        assert read < 50, f"claim {run + 1} on one connection read {read} index entries"


@pytest.mark.parametrize("statement", ["claim_next_unit", "claim_unit"])
async def test_past_a_closed_scope_a_unit_whose_key_is_held_is_skipped(
    raw: asyncpg.Connection, statement: str
) -> None:
    """The oldest unit of the open scope wants a key another unit holds: the next is
    claimed, and the one passed over is still ready."""
    await _seed(raw, "paused")
    holder = await raw.fetchval(
        "INSERT INTO work_units (external_ref, fleet, exclusive)"
        " VALUES ('holder', 'keys', ARRAY['module-a']) RETURNING id"
    )
    held = await raw.fetchrow(QUERIES["claim_unit"], "holder-agent", None, 60, holder)
    assert held is not None
    assert held["unit"]["external_ref"] == "holder"
    await raw.execute(
        "UPDATE work_units SET exclusive = ARRAY['module-a'] WHERE external_ref = 'open-1'"
    )
    claimed, _ = await _claim_reads(raw, statement, None)
    assert claimed == "open-2"
    assert (
        await raw.fetchval("SELECT state::text FROM work_units WHERE external_ref = 'open-1'")
        == "ready"
    )
