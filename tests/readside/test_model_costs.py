"""The cost per model (v_cost_by_model) kept the way every other tally is (migration 0027):
a cost record appends a note and no tally row; the fold adds the notes; the view reads
folded plus pending and equals a full scan whatever has folded; a unit moved by raw SQL
takes its folded and its noted records along; the audit names a broken model tally.
And no tally keeps a stripe column."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from test_read_summaries import _assert_exact, _install_full_scans

from work_ledger.db.connect import connect
from work_ledger.domain.model import Actor
from work_ledger.domain.shape import CostRecord
from work_ledger.service.ledger import Ledger

AGENT = Actor("agent-f")  # o3's holder in the seeded ledger


async def _o3_attempt(ledger: Ledger) -> object:
    return (await ledger.get_unit("o3")).attempts[-1].id


async def _model_row(raw: asyncpg.Connection, model: str) -> asyncpg.Record | None:
    return await raw.fetchrow(
        "SELECT fleet, domain, cost_cents, estimated_cents, input_tokens, units, records"
        " FROM v_cost_by_model WHERE model = $1",
        model,
    )


async def test_a_cost_record_is_noted_then_folded(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """The record's statement writes a note, not the tally; the view counts it at once;
    the fold moves it from the notes into wl_model_tallies; exact all along."""
    await _install_full_scans(raw)
    assert await raw.fetchval("SELECT wl_fold_read_summaries()") > 0
    assert await raw.fetchval("SELECT count(*) FROM wl_cost_notes") == 0
    await seeded.record_cost(await _o3_attempt(seeded), CostRecord(40, "model-n", 1_000), AGENT)
    assert await raw.fetchval("SELECT count(*) FROM wl_cost_notes") == 1
    assert await raw.fetchval("SELECT count(*) FROM wl_model_tallies WHERE model = 'model-n'") == 0
    row = await _model_row(raw, "model-n")
    assert row is not None
    assert (row["cost_cents"], row["input_tokens"], row["units"], row["records"]) == (
        40,
        1000,
        1,
        1,
    )
    await _assert_exact(raw)

    await raw.fetchval("SELECT wl_fold_read_summaries()")
    assert await raw.fetchval("SELECT count(*) FROM wl_cost_notes") == 0
    kept = await raw.fetchrow("SELECT * FROM wl_model_tallies WHERE model = 'model-n'")
    assert kept is not None
    assert (kept["cost_cents"], kept["units"], kept["records"]) == (40, 1, 1)
    assert await _model_row(raw, "model-n") == row
    await _assert_exact(raw)

    # A second record of the same unit and model: one more record, not one more unit.
    await seeded.record_cost(await _o3_attempt(seeded), CostRecord(5, "model-n"), AGENT)
    row = await _model_row(raw, "model-n")
    assert row is not None
    assert (row["cost_cents"], row["units"], row["records"]) == (45, 1, 2)
    await _assert_exact(raw)


async def test_a_moved_unit_takes_folded_and_noted_records_along(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Some of the unit's records folded, one still noted, then raw SQL moves the unit to
    another fleet and domain: both keys equal the scan, before and after the next fold,
    and after it moves back."""
    await _install_full_scans(raw)
    attempt = await _o3_attempt(seeded)
    await seeded.record_cost(attempt, CostRecord(40, "model-m", 1_000, estimated=True), AGENT)
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await seeded.record_cost(attempt, CostRecord(7, "model-m", output_tokens=3), AGENT)
    await raw.execute(
        "UPDATE work_units SET fleet = 'fleet-b', domain = 'archive' WHERE external_ref = 'o3'"
    )
    await _assert_exact(raw)
    row = await _model_row(raw, "model-m")
    assert row is not None
    assert (row["fleet"], row["domain"], row["cost_cents"], row["units"]) == (
        "fleet-b",
        "archive",
        47,
        1,
    )
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await _assert_exact(raw)
    await raw.execute(
        "UPDATE work_units SET fleet = 'fleet-a', domain = 'orders' WHERE external_ref = 'o3'"
    )
    await _assert_exact(raw)


@pytest.mark.timeout(60)
async def test_a_move_and_a_fold_take_turns(
    seeded: Ledger, raw: asyncpg.Connection, database_url: str
) -> None:
    """A move holds the fold off until it commits (the fold skips, as a second fold
    does), and a move waits for a fold under way to commit: no record is folded under one
    key and moved from the other."""
    await _install_full_scans(raw)
    await seeded.record_cost(await _o3_attempt(seeded), CostRecord(40, "model-t"), AGENT)
    mover = await connect(database_url)
    try:
        async with mover.transaction():
            await mover.execute(
                "UPDATE work_units SET domain = 'archive' WHERE external_ref = 'o3'"
            )
            assert await raw.fetchval("SELECT wl_fold_read_summaries()") == 0
        assert await raw.fetchval("SELECT count(*) FROM wl_cost_notes") > 0
        await _assert_exact(raw)

        folder = raw.transaction()
        await folder.start()
        await raw.fetchval("SELECT wl_fold_read_summaries()")
        move = asyncio.create_task(
            mover.execute("UPDATE work_units SET domain = 'orders' WHERE external_ref = 'o3'")
        )
        waiting = await mover_waits_for_the_fold(database_url)
        assert waiting
        assert not move.done()
        await folder.commit()
        await asyncio.wait_for(move, 30)
        await _assert_exact(raw)
    finally:
        await mover.close()


async def mover_waits_for_the_fold(database_url: str) -> bool:
    """True once some backend waits on an advisory lock (the fold's), within 10 s."""
    watcher = await connect(database_url)
    try:
        for _ in range(200):
            if await watcher.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ):
                return True
            await asyncio.sleep(0.05)
        return False
    finally:
        await watcher.close()


@pytest.mark.timeout(60)
async def test_recording_a_cost_does_not_touch_the_model_tallies(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """With the model tallies locked against every other transaction, a cost record still
    commits: its statement appends a note and writes no tally."""
    async with raw.transaction():
        await raw.execute("LOCK TABLE wl_model_tallies, wl_model_units IN ACCESS EXCLUSIVE MODE")
        await asyncio.wait_for(
            seeded.record_cost(await _o3_attempt(seeded), CostRecord(9, "model-w"), AGENT), 20
        )
    assert await raw.fetchval("SELECT count(*) FROM wl_cost_notes") > 0


async def test_a_broken_model_tally_is_named_by_audit_and_rebuilt(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    await _install_full_scans(raw)
    await seeded.record_cost(await _o3_attempt(seeded), CostRecord(40, "model-b"), AGENT)
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await raw.execute("UPDATE wl_model_tallies SET units = units + 1 WHERE model = 'model-b'")
    drift = await raw.fetch("SELECT summary, key FROM wl_read_summary_drift()")
    assert [(r["summary"], r["key"]) for r in drift] == [
        ("wl_model_tallies", "fleet-a/orders/model-b")
    ]
    await raw.execute("SELECT wl_rebuild_read_summaries()")
    await _assert_exact(raw)


async def test_no_tally_has_a_stripe(raw: asyncpg.Connection) -> None:
    """One row per key: nothing spreads a tally over stripes any more."""
    assert (
        await raw.fetch(
            "SELECT table_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND column_name = 'stripe'"
        )
        == []
    )
